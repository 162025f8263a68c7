package v1alpha1_test

import (
	"errors"
	"fmt"
	"os"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// readmeBlock returns the first ```text block after the line that starts with intro.
func readmeBlock(intro string) string {
	raw, err := os.ReadFile("../../README.md")
	Expect(err).NotTo(HaveOccurred())
	_, rest, ok := strings.Cut(string(raw), "\n"+intro)
	Expect(ok).To(BeTrue(), "README has no line starting %q", intro)
	_, rest, ok = strings.Cut(rest, "```text\n")
	Expect(ok).To(BeTrue(), "no text block after %q", intro)
	block, _, ok := strings.Cut(rest, "```")
	Expect(ok).To(BeTrue(), "unterminated text block after %q", intro)
	return block
}

// asKubectlPrints renders an Invalid answer as kubectl does
// (k8s.io/kubectl/pkg/cmd/util: checkErr, statusCausesToAggrError and
// MultilineError): "The Kind "name" is invalid:" then "* field: message"
// per cause, in the order the API server sent them.
func asKubectlPrints(err error) string {
	var status apierrors.APIStatus
	Expect(errors.As(err, &status)).To(BeTrue(), "not an API status: %v", err)
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "expected Invalid, got %v", err)
	d := status.Status().Details
	var b strings.Builder
	fmt.Fprintf(&b, "The %s %q is invalid:\n", d.Kind, d.Name)
	for _, c := range d.Causes {
		fmt.Fprintf(&b, "* %s: %s\n", c.Field, c.Message)
	}
	return b.String()
}

var _ = Describe("The README's example refusal", func() {
	It("is what the API server answers, byte for byte, every time", func() {
		want := readmeBlock("The configuration that caused the incident is refused")
		for range 20 {
			p := policyFor(GinkgoTB(), policyCase{Mutate: func(s *v1.RetryPolicySpec) {
				s.MaxAttempts = 5
				s.Backoff.Jitter = ptr.To(v1.JitterNone)
				s.Backoff.Base = dur("0s")
				s.BudgetRef = nil
			}})
			p.Name, p.Namespace = "sms-2fa-dispatch-inc-2901", "cel"
			got := asKubectlPrints(k8s.Create(ctx, p, client.DryRunAll))
			Expect(got).To(Equal(want), "the API server answers:\n%s", got)
		}
	})
})
