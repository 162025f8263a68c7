package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/internal/testenv"
)

// consumerDeadline bounds how long the controller may take to count pods.
const consumerDeadline = 30 * time.Second

// teams tells the chapter on layers that cross namespaces: a parent
// consents to its children's namespaces, a child it did not allow is
// refused, and a foreign child it did allow constrains the parent's own
// attempts.
func (s *story) teams() error {
	for _, step := range []struct {
		file     string
		accepted bool
	}{
		{"1-gateway-and-payments.yaml", true},
		{"2-ads-job.yaml", false},
		{"3-gateway-retries.yaml", false},
	} {
		f := testenv.Path("hack", "demo", "teams", step.file)
		s.note(firstComment(f))
		err := s.apply("-f", f)
		if (err == nil) != step.accepted {
			return fmt.Errorf("%s: accepted=%v, want %v", step.file, err == nil, step.accepted)
		}
		if err != nil {
			s.refused++
		}
	}
	if err := s.converged(); err != nil {
		return err
	}
	s.note("Each team's policy, in its own namespace; the connector's leaf counts the gateway's layer:")
	return s.kubectl("get", "rp", "-n", "payments")
}

// fleet tells the chapter on a budget that many pods share: the controller
// counts the pods its selector matches, publishes the count, and each pod
// enforces its share of the fleet's allowance.
func (s *story) fleet(ctx context.Context, tmp string) error {
	if err := s.apply("-f", testenv.Path("hack", "demo", "fleet", "budget-and-policy.yaml")); err != nil {
		return err
	}
	for _, replicas := range []int{2, 20} {
		s.note(
			fmt.Sprintf("The SMS gateway runs %d pods (no kubelet here: they stay Pending, and they count, since a pod may retry from the moment it starts):", replicas),
		)
		pods := filepath.Join(tmp, fmt.Sprintf("sms-gateway-%d.yaml", replicas))
		if err := os.WriteFile(pods, []byte(smsGatewayPods(replicas)), 0o644); err != nil {
			return err
		}
		if err := s.kubectl("apply", "-f", pods); err != nil {
			return err
		}
		if err := s.waitForConsumers(ctx, "sms-fleet", "sms-gateway-send", int32(replicas)); err != nil {
			return err
		}
		if err := s.kubectl("get", "rb", "sms-fleet"); err != nil {
			return err
		}
	}
	s.note("The count is published once, dated, in the budget's own ConfigMap; every pod joins it to the payloads that draw " +
		"on the budget, and each pod the count names retries at most 20/20 = 1 time a second.")
	s.note("A count older than a minute (the controller is down), or one that does not name a pod, gives that pod no share.")
	if err := s.count("sms-fleet"); err != nil {
		return err
	}
	s.note("The count names no pod itself: the members are in up to 256 shards, by the first byte of each pod's fingerprint, " +
		"each written only when its own members change; a pod watches the count and its own shard alone, so what it " +
		"receives is the same size however large the fleet.")
	if err := s.kubectl("get", "cm", "-l", policyconfig.MembersLabel+"=sms-fleet", "-L", policyconfig.ShardLabel); err != nil {
		return err
	}
	return s.payload("sms-gateway-send")
}

// count shows a fleet budget's published count.
func (s *story) count(budget string) error {
	var cm corev1.ConfigMap
	key := client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: policyconfig.BudgetConfigMapName(budget)}
	if err := s.reader.Get(context.Background(), key, &cm); err != nil {
		return err
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, []byte(cm.Data[policyconfig.CountDataKey]), "   ", "  "); err != nil {
		return err
	}
	fmt.Fprintf(s.w, "\n   $ kubectl get cm %s -o jsonpath='{.data.consumers\\.json}'\n   %s\n", cm.Name, pretty.String())
	return nil
}

// smsGatewayPods is n pods labelled as the budget's consumers.
func smsGatewayPods(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Pod
metadata:
  name: sms-gateway-%d
  labels: {app: sms-gateway}
spec:
  containers: [{name: gateway, image: retryguard-demo/sms-gateway:never-pulled}]
`, i)
	}
	return b.String()
}

// waitForConsumers waits until the budget's status counts want consumers,
// its ConfigMap publishes that count, and policy's payload says it is counted.
func (s *story) waitForConsumers(ctx context.Context, budget, policy string, want int32) error {
	deadline := time.Now().Add(consumerDeadline)
	for {
		var b v1.RetryBudget
		err := s.reader.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: budget}, &b)
		counted := err == nil && b.Status.Consumers != nil && *b.Status.Consumers == want
		var cm corev1.ConfigMap
		if err == nil {
			err = s.reader.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: policyconfig.ConfigMapName(policy)}, &cm)
		}
		var countCM corev1.ConfigMap
		if err == nil {
			err = s.reader.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: policyconfig.BudgetConfigMapName(budget)}, &countCM)
		}
		if err == nil && counted {
			p, perr := policyconfig.Parse([]byte(cm.Data[policyconfig.DataKey]))
			c, cerr := policyconfig.ParseCount([]byte(countCM.Data[policyconfig.CountDataKey]))
			if perr == nil && cerr == nil && p.Budget != nil && p.Budget.Counted && c.Consumers.Count == want {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("RetryBudget %s and the payload of %s do not count %d consumers after %s (err %v, status %+v)",
				budget, policy, want, consumerDeadline, err, b.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
