package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/controllers"
	"github.com/retryguard/retryguard/internal/crdvalidation"
	"github.com/retryguard/retryguard/runtime/watch"
	"github.com/retryguard/retryguard/runtime/watch/informer"
)

// samplePolicy is the RetryPolicy of config/samples the drill runs under.
const samplePolicy = "sms-2fa-dispatch"

// samplePayload builds the payload the controller publishes for the named
// RetryPolicy among the manifests in dir, with the controller's own code:
// the spec and cross-object rules decide, and BuildPayload writes it. A
// policy the controller would not enforce is an error.
func samplePayload(dir, name, namespace string) (*policyconfig.Payload, error) {
	policies, budgets, err := readManifests(dir)
	if err != nil {
		return nil, err
	}
	var p *v1.RetryPolicy
	for i := range policies {
		policies[i].Namespace = namespace
		if policies[i].Name == name {
			p = &policies[i]
		}
	}
	if p == nil {
		return nil, fmt.Errorf("%s holds no RetryPolicy %q", dir, name)
	}
	spec := field.NewPath("spec")
	if errs, err := crdvalidation.Validate(context.Background(), p); err != nil || len(errs) > 0 {
		return nil, fmt.Errorf("RetryPolicy %s is invalid, so the controller publishes it NoRetry: %w", name, errors.Join(err, errs.ToAggregate()))
	}
	verdict, err := policygraph.ValidateRetryPolicy(context.Background(), policygraph.NewStaticLookup(policies...), p,
		policygraph.DefaultLimits(), spec)
	if err != nil {
		return nil, err
	}
	if len(verdict.Errors) > 0 {
		return nil, fmt.Errorf("RetryPolicy %s breaks a cross-object rule: %w", name, verdict.Errors.ToAggregate())
	}
	var budget *v1.RetryBudget
	if ref := p.Spec.BudgetRef; ref != nil {
		if ref.Namespace != nil && *ref.Namespace != namespace {
			return nil, fmt.Errorf("RetryPolicy %s: budgetRef names a RetryBudget of namespace %q; the drill reads one namespace, %s", name, *ref.Namespace, dir)
		}
		for i := range budgets {
			if budgets[i].Name == ref.Name {
				budget = &budgets[i]
				budget.Namespace = namespace
			}
		}
		if budget == nil {
			return nil, fmt.Errorf("RetryPolicy %s: budgetRef %q names no RetryBudget in %s", name, ref.Name, dir)
		}
	}
	return controllers.BuildPayload(p, budget, verdict.Analysis.LeafAttempts(),
		policyconfig.Enforcement{Mode: policyconfig.Enforced}), nil
}

// readManifests decodes every RetryPolicy and RetryBudget in dir's YAML files.
func readManifests(dir string) ([]v1.RetryPolicy, []v1.RetryBudget, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, nil, err
	}
	var policies []v1.RetryPolicy
	var budgets []v1.RetryBudget
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		for doc := range strings.SplitSeq(string(data), "\n---") {
			var kind struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &kind); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", f, err)
			}
			switch kind.Kind {
			case "RetryPolicy":
				var p v1.RetryPolicy
				if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
					return nil, nil, fmt.Errorf("%s: %w", f, err)
				}
				policies = append(policies, p)
			case "RetryBudget":
				var b v1.RetryBudget
				if err := yaml.UnmarshalStrict([]byte(doc), &b); err != nil {
					return nil, nil, fmt.Errorf("%s: %w", f, err)
				}
				budgets = append(budgets, b)
			}
		}
	}
	return policies, budgets, nil
}

// publishFiles writes p as kubelet mounts a ConfigMap volume whose item
// policy.json is projected to <policy>.json: the data in a timestamped
// directory, ..data a symlink to it, and the file a symlink through ..data.
func publishFiles(dir string, p *policyconfig.Payload) error {
	data, err := policyconfig.Marshal(p)
	if err != nil {
		return err
	}
	file := p.Policy.Name + ".json"
	version := ".." + time.Now().UTC().Format("2006_01_02_15_04_05.000000000")
	if err := os.MkdirAll(filepath.Join(dir, version), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, version, file), data, 0o644); err != nil {
		return err
	}
	return errors.Join(os.Symlink(version, filepath.Join(dir, "..data")),
		os.Symlink(filepath.Join("..data", file), filepath.Join(dir, file)))
}

// policySource is where the drill reads its policy from.
type policySource struct {
	Kind      string `json:"kind"` // "files" or "informer"
	Where     string `json:"where"`
	Namespace string `json:"namespace"`
}

// startWatcher starts the watcher the drill's Option C reads its policy
// through, and waits until it serves the sample policy.
func startWatcher(ctx context.Context, src policySource) (watch.Watcher, error) {
	var w watch.Watcher
	switch src.Kind {
	case "files":
		f := watch.NewFiles(src.Where)
		f.Namespace = src.Namespace // the drill's pod namespace: an unknown one serves nothing
		w = f
	case "informer":
		cfg, err := clientcmd.BuildConfigFromFlags("", src.Where)
		if err != nil {
			return nil, err
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		w = informer.New(client, src.Namespace)
	default:
		return nil, fmt.Errorf("unknown policy source %q", src.Kind)
	}
	start, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	for {
		if _, ok := w.Policy(samplePolicy); ok {
			return w, nil
		}
		select {
		case <-start.Done():
			return nil, fmt.Errorf("the %s watcher on %s serves no policy %s (apply config/samples in namespace %s)",
				src.Kind, src.Where, samplePolicy, src.Namespace)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
