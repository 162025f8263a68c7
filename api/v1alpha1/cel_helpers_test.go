package v1alpha1_test

import (
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

type unstructuredObj struct{ *unstructured.Unstructured }

func (u unstructuredObj) SetNestedField(v any, fields ...string) error {
	return unstructured.SetNestedField(u.Object, v, fields...)
}

// toUnstructured lets a test send what a typed client never could, such as a
// duration string that does not parse.
func toUnstructured(obj runtime.Object) (unstructuredObj, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return unstructuredObj{}, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion("policy.retryguard.io/v1alpha1")
	u.SetKind("RetryPolicy")
	return unstructuredObj{u}, nil
}

// printerColumns reads the installed CRD's printer column names.
func printerColumns(name string) []string {
	var crd apiextensionsv1.CustomResourceDefinition
	Expect(apiextensionsv1.AddToScheme(k8s.Scheme())).To(Succeed())
	Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &crd)).To(Succeed())
	var out []string
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		if c.Priority > 0 {
			out = append(out, c.Name+" (wide)") // shown by -o wide only
			continue
		}
		out = append(out, c.Name)
	}
	return out
}
