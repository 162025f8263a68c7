package informer_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/watch/informer"
)

// BenchmarkInformerDeliverySpread measures the delivery bound a fleet
// budget's growing share waits (policyconfig.ConsumerCountDelivery): for
// each ConfigMap update, the time from the write to the last of 50
// informers serving it, as 50 pods of one namespace would. It reports the
// median, p99 and worst of that spread; the bound must sit well above the
// worst. Run with -benchtime 200x.
func BenchmarkInformerDeliverySpread(b *testing.B) {
	const pods = 50
	cs := startAPIServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	raw, _ := policyconfig.Marshal(fixtures.Named("sms", 1))
	cm, err := cs.CoreV1().ConfigMaps("auth").Create(ctx, configMap("sms", raw), metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	served := make([]int64, pods) // the generation each watcher serves
	at := make([]time.Time, pods) // when it began serving it
	for i := range pods {
		w := informer.New(cs, "auth")
		w.OnChange(func(string) {
			if p, ok := w.Policy("sms"); ok {
				mu.Lock()
				served[i], at[i] = p.Policy.Generation, time.Now()
				mu.Unlock()
			}
		})
		if err := w.Start(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var spread []time.Duration
	gen := int64(1)
	for b.Loop() {
		gen++
		raw, _ := policyconfig.Marshal(fixtures.Named("sms", gen))
		cm.Data[policyconfig.DataKey] = string(raw)
		start := time.Now()
		if cm, err = cs.CoreV1().ConfigMaps("auth").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		deadline := start.Add(30 * time.Second)
		for {
			mu.Lock()
			all, last := true, start
			for i := range pods {
				all = all && served[i] == gen
				if at[i].After(last) {
					last = at[i]
				}
			}
			mu.Unlock()
			if all {
				spread = append(spread, last.Sub(start))
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("generation %d did not reach all %d informers in 30 s", gen, pods)
			}
			time.Sleep(time.Millisecond)
		}
	}
	slices.Sort(spread)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(spread[len(spread)/2]), "p50-ms")
	b.ReportMetric(ms(spread[len(spread)*99/100]), "p99-ms")
	b.ReportMetric(ms(spread[len(spread)-1]), "max-ms")
	b.ReportMetric(ms(policyconfig.ConsumerCountDelivery), "bound-ms")
}
