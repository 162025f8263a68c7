package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/internal/testenv"
)

// namespaceDeadline bounds the namespace controller's emptying and removal
// of a deleted namespace.
const namespaceDeadline = 30 * time.Second

// cleanup tells the chapter on deletion: a deleted policy's ConfigMap is
// garbage-collected (the policy owns it), and a deleted namespace
// terminates, is emptied by the namespace controller, and disappears.
func (s *story) cleanup(ctx context.Context) error {
	const policy, namespace = "marketing-campaign-notify", "team-sunset"
	selector := policyconfig.PolicyLabel + "=" + policy

	s.note("The campaign is over and its team deletes the policy, which owns its ConfigMap: the garbage collector removes that too.")
	if err := s.kubectl("delete", "rp", policy); err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: policyconfig.ConfigMapName(policy)}}
	if _, err := testenv.Gone(ctx, s.reader, cm, testenv.CollectionDeadline); err != nil {
		return fmt.Errorf("the ConfigMap of the deleted policy %s is still there after %s: %w", policy, testenv.CollectionDeadline, err)
	}
	if err := s.kubectl("get", "cm", "-l", selector); err != nil {
		return err
	}

	s.note("A team that leaves has its namespace deleted, budget and policy included:")
	if err := s.kubectl("create", "namespace", namespace); err != nil {
		return err
	}
	if err := s.apply("-n", namespace,
		"-f", testenv.Path("config", "samples", "policy_v1alpha1_retrybudget_marketing.yaml"),
		"-f", testenv.Path("config", "samples", "policy_v1alpha1_retrypolicy_marketing.yaml")); err != nil {
		return err
	}
	if err := s.converged(); err != nil {
		return err
	}
	if err := s.kubectl("get", "cm", "-n", namespace, "-l", selector); err != nil {
		return err
	}
	if err := s.kubectl("delete", "namespace", namespace, "--wait=false"); err != nil {
		return err
	}
	s.note("The namespace terminates while the namespace controller deletes what is in it...")
	if err := s.kubectl("get", "namespace", namespace); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	took, err := testenv.Gone(ctx, s.reader, ns, namespaceDeadline)
	if err != nil {
		return fmt.Errorf("the deleted namespace %s is still there after %s: %w", namespace, namespaceDeadline, err)
	}
	s.note(fmt.Sprintf("...and is gone %.1f s later, with everything in it:", took.Seconds()))
	if err := s.kubectl("get", "namespace", namespace); err == nil {
		return fmt.Errorf("namespace %s is still listed", namespace)
	}
	return nil
}
