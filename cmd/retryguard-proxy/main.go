// Command retryguard-proxy is Retryguard's egress sidecar for services in any
// language: the application sends plain HTTP to localhost:<port>, and the
// proxy sends it on to the route's upstream (TLS for https) through the
// runtime's retry.RoundTripper, under the route's RetryPolicy
// (docs/proxy.md). It runs as a native sidecar, an init container with
// restartPolicy: Always, which the injector adds to pods annotated
// retryguard.io/inject: "true".
//
// Route listeners bind to loopback only: the pod's own containers are its
// only callers, so the sidecar is never an open proxy for other pods. So
// does the admin listener, whose letters carry idempotency keys; only
// /metrics and the probes listen on every address, on a port of their own.
//
// The binary carries the Mozilla roots (x509roots/fallback), used when the
// image has no CA bundle, as a scratch image has none; --ca-file adds a
// team's private CAs to them.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"
	_ "golang.org/x/crypto/x509roots/fallback" // the roots of an image without a CA bundle
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/proxy"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/events/kafka"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
	"github.com/retryguard/retryguard/runtime/watch/informer"
)

// Defaults the injector and the manual YAML of docs/proxy.md rely on.
const (
	defaultRoutes      = "/etc/retryguard/proxy/routes.json"
	defaultDeadLetters = "/var/run/retryguard/proxy/deadletters.journal"
)

// The bounds of /deadletters?limit=: how many letters one answer holds, so
// that an answer's size never grows with the journal's.
const (
	DefaultLetterLimit = 100
	MaxLetterLimit     = 1000
)

// adminHost is the admin listener's address: the pod's own loopback.
const adminHost = "127.0.0.1"

type options struct {
	routes, watch, policyDir, deadLetters, listenHost string
	adminPort, metricsPort                            int
	deadLettersMaxBytes                               int64
	brokers, deadLetterTopic                          string
	caFile                                            string
}

func main() {
	var o options
	flag.StringVar(
		&o.routes,
		"routes",
		defaultRoutes,
		"the route table (JSON, docs/proxy.md); the injector mounts the pod's "+proxy.RoutesAnnotation+" annotation here",
	)
	flag.StringVar(&o.watch, "watch", "informer", "where policies come from: informer (the published ConfigMaps, needs get/list/watch on ConfigMaps) or files")
	flag.StringVar(&o.policyDir, "policy-dir", "", "with --watch=files: the mounted ConfigMap volume")
	flag.StringVar(&o.deadLetters, "dead-letters", defaultDeadLetters, "the dead-letter journal (the outbox); on a volume that outlives the container")
	flag.Int64Var(&o.deadLettersMaxBytes, "dead-letters-max-bytes", 0,
		"the journal's cap in bytes (0: none): at it, a letter is not kept, the answer says so (Retryguard-Letter: dropped) "+
			"and it is counted; keep the volume at twice it")
	flag.StringVar(&o.listenHost, "listen-host", "127.0.0.1", "the address route listeners bind to")
	flag.IntVar(&o.adminPort, "admin-port", proxy.DefaultAdminPort, "the port of /deadletters, /policies, /healthz and /readyz (127.0.0.1 only)")
	flag.IntVar(&o.metricsPort, "metrics-port", proxy.DefaultMetricsPort, "the port of /metrics, /healthz and /readyz (all addresses: scraping and probes)")
	flag.StringVar(
		&o.brokers,
		"kafka-brokers",
		"",
		"comma-separated Kafka seed brokers: lifecycle events go to each policy's eventsTopic, dead letters to --dead-letter-topic",
	)
	flag.StringVar(&o.caFile, "ca-file", "",
		"PEM certificates the upstreams' TLS is also verified against, beside the system's roots (or the Mozilla roots the binary carries)")
	flag.StringVar(&o.deadLetterTopic, "dead-letter-topic", "", "with --kafka-brokers: the topic the outbox forwarder ships dead letters to")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		slog.Error("retryguard-proxy", "err", err)
		os.Exit(1)
	}
}

type source interface {
	retry.Source
	Start(context.Context) error
	Rejected() uint64
}

func run(ctx context.Context, o options) error {
	data, err := os.ReadFile(o.routes)
	if err != nil {
		return fmt.Errorf("the route table: %w", err)
	}
	table, err := proxy.Parse(data)
	if err != nil {
		return fmt.Errorf("%s: %w", o.routes, err)
	}
	if err := table.Validate(o.adminPort, o.metricsPort); err != nil {
		return fmt.Errorf("%s: %w", o.routes, err)
	}
	var src source
	switch o.watch {
	case "informer":
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return err
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		src = informer.New(cs, watch.PodNamespace())
	case "files":
		src = watch.NewFiles(o.policyDir)
	default:
		return fmt.Errorf("--watch=%q: want informer or files", o.watch)
	}
	if err := src.Start(ctx); err != nil {
		return err
	}

	journal, err := deadletter.Open(o.deadLetters, deadletter.WithMaxBytes(o.deadLettersMaxBytes))
	if err != nil {
		return fmt.Errorf("the dead-letter journal: %w", err)
	}
	defer journal.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(watch.Collector(src))
	// One registry for both of the proxy's executors: the pod holds one
	// share of each budget ($POD_UID), with the source's delivery bound.
	delivery := time.Duration(1<<63 - 1)
	if d, ok := src.(interface{ DeliveryBound() time.Duration }); ok {
		delivery = d.DeliveryBound()
	}
	opts := []retry.Option{
		retry.WithBudgets(budget.NewRegistry(nil, budget.WithDelivery(delivery))),
		retry.WithDeadLetters(newKeptSink(journal, reg)),
		retry.WithMetrics(retry.NewMetrics(reg)),
	}
	tr, err := startTracing(ctx)
	if err != nil {
		return err
	}
	if tr != nil {
		obs, err := tr.option()
		if err != nil {
			return err
		}
		opts = append(opts, obs)
		defer func() {
			flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			tr.stop(flush)
		}()
	}
	if o.brokers != "" {
		stopKafka, sinkOpt, err := startKafka(ctx, o, journal)
		if err != nil {
			return err
		}
		defer stopKafka()
		opts = append(opts, sinkOpt)
	}
	base, pools, err := trust(o.caFile)
	if err != nil {
		return err
	}
	rt := proxy.NewRuntime(src, pools, base, opts...)

	var servers []*http.Server
	var ready atomic.Bool
	for _, port := range table.Ports() {
		p, err := rt.New(table, port)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(o.listenHost, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		var h http.Handler = tellDropped(p)
		if tr != nil {
			h = tr.extract(h)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() { _ = srv.Serve(ln) }()
	}
	probes := func(mux *http.ServeMux) {
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !ready.Load() {
				http.Error(w, "starting", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
	}
	admin, metrics := http.NewServeMux(), http.NewServeMux()
	probes(admin)
	admin.HandleFunc("GET /policies/{name}", func(w http.ResponseWriter, r *http.Request) { servePolicy(w, src, rt, r.PathValue("name")) })
	admin.HandleFunc("GET /deadletters", func(w http.ResponseWriter, r *http.Request) { serveDeadLetters(w, r, journal) })
	probes(metrics)
	metrics.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	for addr, mux := range map[string]*http.ServeMux{
		net.JoinHostPort(adminHost, strconv.Itoa(o.adminPort)): admin,
		":" + strconv.Itoa(o.metricsPort):                      metrics,
	} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() { _ = srv.Serve(ln) }()
	}
	ready.Store(true)
	slog.Info("retryguard-proxy ready", "routes", len(table.Routes), "ports", table.Ports(), "watch", o.watch, "admin", o.adminPort, "metrics", o.metricsPort,
		"tracing", tr != nil)

	<-ctx.Done()
	// A native sidecar is stopped after the application's containers, so
	// what is in flight now is the last of its calls: let it finish.
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(shutdown)
	}
	return nil
}

// serveDeadLetters streams the journal's oldest letters, at most ?limit= of
// them (DefaultLetterLimit, at most MaxLetterLimit), one at a time, whether
// more follow, and how many are not yet forwarded: a pod without Kafka
// keeps them there for reconciliation. Memory holds one letter at a time,
// whatever the journal's size. An error met while streaming, after the
// status is sent, is the answer's "error" member.
func serveDeadLetters(w http.ResponseWriter, r *http.Request, j *deadletter.Journal) {
	limit := DefaultLetterLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLetterLimit {
			http.Error(w, "limit: "+codes.OutOfRange.Message(fmt.Sprintf("%q is not a whole number from 1 to %d", v, MaxLetterLimit)), http.StatusBadRequest)
			return
		}
		limit = n
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"letters":[`)
	enc := json.NewEncoder(w)
	n, more := 0, false
	err := j.Scan(func(l retry.DeadLetter) bool {
		if n == limit {
			more = true
			return false
		}
		if n > 0 {
			_, _ = io.WriteString(w, ",")
		}
		n++
		return enc.Encode(l) == nil
	})
	tail := map[string]any{"more": more}
	if err == nil {
		tail["unforwarded"], err = j.Unforwarded()
	}
	if err != nil {
		tail["error"] = err.Error()
	}
	_, _ = io.WriteString(w, "],")
	data, _ := json.Marshal(tail)
	_, _ = w.Write(data[1:]) // the members after "letters"
}

// servePolicy answers what the proxy enforces for one policy: whether it
// knows it, its attempts and generation, and its budget as this pod divides
// it (the consumer count its payload carries, whether the count names this
// pod by $POD_UID, and the denominator D in force; 0: no share).
func servePolicy(w http.ResponseWriter, src retry.Source, rt *proxy.Runtime, name string) {
	p, ok := src.Policy(name)
	out := map[string]any{"found": ok}
	if ok {
		out["maxAttempts"], out["generation"] = p.Policy.MaxAttempts, p.Policy.Generation
		if b := p.Budget; b != nil {
			v := map[string]any{"name": b.Name, "named": false, "denominator": int64(0)}
			if enforced, ok := rt.Budget(name); ok {
				v["denominator"] = enforced.Denominator()
			}
			if c := b.Consumers; c != nil {
				v["consumers"], v["observedAt"], v["named"] = c.Count, c.ObservedAt, c.Includes(os.Getenv(budget.PodUIDEnv))
			}
			out["budget"] = v
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// trust is the transports the upstreams are reached through: the system's
// roots (the Mozilla roots the binary carries when the image has none),
// and the certificates of caFile beside them.
func trust(caFile string) (http.RoundTripper, *retry.Pools, error) {
	if caFile == "" {
		return nil, &retry.Pools{}, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--ca-file: %w", err)
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		return nil, nil, fmt.Errorf("--ca-file: the system's roots: %w", err)
	}
	if !roots.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("--ca-file: %s holds no PEM certificate", caFile)
	}
	base := proxy.Transport()
	base.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	return base, &retry.Pools{New: func(maxConnections int) *http.Transport {
		t := base.Clone()
		t.MaxConnsPerHost, t.MaxIdleConnsPerHost = maxConnections, maxConnections
		return t
	}}, nil
}

// startKafka starts the events sink and the outbox forwarder.
func startKafka(ctx context.Context, o options, journal *deadletter.Journal) (func(), retry.Option, error) {
	if o.deadLetterTopic == "" {
		return nil, nil, errors.New("--kafka-brokers needs --dead-letter-topic")
	}
	client, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(o.brokers, ",")...))
	if err != nil {
		return nil, nil, err
	}
	sink := kafka.NewEventSink(client, kafka.DefaultBuffer)
	fwd := &kafka.Forwarder{Journal: journal, Client: client, Topic: o.deadLetterTopic}
	go sink.Run(ctx)
	go fwd.Run(ctx)
	return func() {
		sink.Close()
		_ = fwd.Close()
		client.Close()
	}, retry.WithEventSink(sink), nil
}
