package policygraph

import (
	"context"
	"math"

	"k8s.io/utils/ptr"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// HiddenAttemptsSource is the status.hiddenLayers source of a policy's own
// spec.layer.hiddenAttempts.
const HiddenAttemptsSource = "spec.layer.hiddenAttempts"

// LayerDetector is implemented by a Lookup that can see layers which
// retry for a policy without a RetryPolicy of their own (a service mesh's
// proxies). The rules multiply what it detects into the policy's layer
// wherever the product is computed; a Lookup without it detects nothing.
type LayerDetector interface {
	// DetectedLayers lists the layers that retry p's calls, each with the
	// attempts it makes per call given, the first included. Layers that
	// make a single attempt need not be listed.
	DetectedLayers(ctx context.Context, p *v1.RetryPolicy) ([]v1.HiddenLayer, error)
}

// HiddenLayers lists every layer that multiplies p's attempts unseen by
// the runtime: spec.layer.hiddenAttempts when above 1, then what d detects
// (nothing when d is nil). Status reports this list.
func HiddenLayers(ctx context.Context, d LayerDetector, p *v1.RetryPolicy) ([]v1.HiddenLayer, error) {
	var out []v1.HiddenLayer
	if h := ptr.Deref(p.Spec.Layer.HiddenAttempts, v1.DefaultHiddenAttempts); h > 1 {
		out = append(out, v1.HiddenLayer{Source: HiddenAttemptsSource, Attempts: h})
	}
	if d == nil {
		return out, nil
	}
	detected, err := d.DetectedLayers(ctx, p)
	if err != nil {
		return nil, err
	}
	for _, l := range detected {
		if l.Attempts > 1 {
			out = append(out, l)
		}
	}
	return out, nil
}

// LayerIn is p's layer as a chain holds it, with every hidden layer (its
// own hiddenAttempts and what lk detects) multiplied into Hidden,
// saturating at MaxInt32.
func LayerIn(ctx context.Context, lk Lookup, p *v1.RetryPolicy) (Layer, error) {
	l := LayerOf(p)
	d, ok := lk.(LayerDetector)
	if !ok {
		return l, nil
	}
	hidden, err := HiddenLayers(ctx, d, p)
	if err != nil {
		return l, err
	}
	product := int64(1)
	for _, h := range hidden {
		product = min(product*int64(max(h.Attempts, 1)), math.MaxInt32)
	}
	l.Hidden = int32(product)
	return l, nil
}
