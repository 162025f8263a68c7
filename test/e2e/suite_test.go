package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/sync/errgroup"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	policyv1alpha1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/hack/e2e/cluster"
	"github.com/retryguard/retryguard/hack/e2e/image"
)

// The release's images, the manager and retryguard-proxy (which the chart's
// injector adds), are make image's (or, under a plain go test, the suite's
// own builds, tagged ownTag): the suite publishes them with the chart to the
// node's registry, and the kubelet pulls them from there. The test apps are
// imported into containerd, and their pods use imagePullPolicy Never.
const (
	managerRepository = "retryguard/manager"
	proxyRepository   = "retryguard/proxy"
	ownTag            = "e2e"
	vendorImage       = "retryguard.local/e2e/vendor:1"
	smsappImage       = "retryguard.local/e2e/smsapp:1"
	netprobeImage     = "retryguard.local/e2e/netprobe:1"
	// busyboxImage is Debian's busybox-static, the client that is not Go
	// (hack/e2e/busybox-asset.sh).
	busyboxImage = "retryguard.local/e2e/busybox:1"
	// metadepImage and fleetclientImage are the fleet drill's dependency
	// and client pods.
	metadepImage     = "retryguard.local/e2e/metadep:1"
	fleetclientImage = "retryguard.local/e2e/fleetclient:1"
)

// The release path's inputs: the image archives it pushes, and the tools
// (hack/gotool.sh) that sign and describe them.
var (
	managerTar, proxyTar string
	cosignBin, sbomTool  string
)

var (
	repoRoot string
	node     *cluster.Cluster
	cs       kubernetes.Interface
	k8s      client.Client
	scheme   = runtime.NewScheme()
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	if !RunSpecs(t, "Retryguard end to end on a single-node cluster", Label("e2e")) {
		// Ginkgo's summary names a failed spec and its line only; a CI log
		// cut to its last lines should also say why.
		for _, f := range failures {
			t.Log(f)
		}
	}
}

// failures is each failed spec's reason, one line each, for TestE2E.
var failures []string

var _ = ReportAfterSuite("failure digest", func(r Report) {
	for _, s := range r.SpecReports {
		if s.Failed() {
			msg := strings.Join(strings.Fields(s.Failure.Message), " ")
			if len(msg) > 600 {
				msg = msg[:600] + "…"
			}
			failures = append(failures, fmt.Sprintf("FAILED %s (%s): %s", s.LeafNodeText, s.Failure.Location, msg))
		}
	}
})

func logf(format string, args ...any) {
	fmt.Fprintf(GinkgoWriter, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

var _ = BeforeSuite(func(ctx SpecContext) {
	// The client logs the API server's warnings (an admission webhook's
	// among them) through controller-runtime's logger.
	ctrllog.SetLogger(funcr.New(func(prefix, args string) { logf("%s %s", prefix, args) }, funcr.Options{}))
	Expect(policyv1alpha1.AddToScheme(scheme)).To(Succeed())
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	wd, err := os.Getwd()
	Expect(err).NotTo(HaveOccurred())
	repoRoot, err = cluster.RepoRoot(wd)
	Expect(err).NotTo(HaveOccurred())

	start := time.Now()
	opts, err := cluster.Assets(ctx, repoRoot, logf)
	Expect(err).NotTo(HaveOccurred())
	AddReportEntry("assets", time.Since(start).Round(time.Second).String())

	// The cluster comes up while the images and the release tools build.
	managerTar, proxyTar = os.Getenv("RETRYGUARD_E2E_MANAGER_IMAGE"), os.Getenv("RETRYGUARD_E2E_PROXY_IMAGE")
	vendorTar := filepath.Join(cluster.DefaultImageDir, "vendor.tar")
	smsappTar := filepath.Join(cluster.DefaultImageDir, "smsapp.tar")
	netprobeTar := filepath.Join(cluster.DefaultImageDir, "netprobe.tar")
	busyboxTar := filepath.Join(cluster.DefaultImageDir, "busybox.tar")
	metadepTar := filepath.Join(cluster.DefaultImageDir, "metadep.tar")
	fleetclientTar := filepath.Join(cluster.DefaultImageDir, "fleetclient.tar")
	var g errgroup.Group
	if managerTar == "" {
		// A plain `go test` without `make e2e`: a static build of cmd/manager,
		// packed by the packer `make image` uses (user 65532, no shell,
		// /manager).
		managerTar = filepath.Join(cluster.DefaultImageDir, "manager.tar")
		g.Go(func() error {
			return image.BinaryImage(ctx, repoRoot, "./cmd/manager", managerTar, managerRepository+":"+ownTag,
				image.Config{Entrypoint: []string{"/manager"}})
		})
	}
	if proxyTar == "" {
		proxyTar = filepath.Join(cluster.DefaultImageDir, "proxy.tar")
		g.Go(func() error {
			return image.BinaryImage(ctx, repoRoot, "./cmd/retryguard-proxy", proxyTar, proxyRepository+":"+ownTag,
				image.Config{Entrypoint: []string{"/retryguard-proxy"}})
		})
	}
	for tool, bin := range map[string]*string{"cosign": &cosignBin, "cyclonedx-gomod": &sbomTool} {
		g.Go(func() (err error) {
			*bin, err = cluster.Script(ctx, filepath.Join(repoRoot, "hack", "gotool.sh"), tool)
			return err
		})
	}
	g.Go(func() error {
		return image.BinaryImage(ctx, wd, "./apps/vendor", vendorTar, vendorImage, image.Config{})
	})
	g.Go(func() error {
		return image.BinaryImage(ctx, wd, "./apps/smsapp", smsappTar, smsappImage, image.Config{})
	})
	g.Go(func() error {
		return image.BinaryImage(ctx, wd, "./apps/netprobe", netprobeTar, netprobeImage, image.Config{})
	})
	g.Go(func() error {
		return image.BinaryImage(ctx, wd, "./apps/metadep", metadepTar, metadepImage, image.Config{})
	})
	g.Go(func() error {
		return image.BinaryImage(ctx, wd, "./apps/fleetclient", fleetclientTar, fleetclientImage, image.Config{})
	})
	g.Go(func() error {
		dir, err := cluster.Script(ctx, filepath.Join(repoRoot, "hack", "e2e", "busybox-asset.sh"))
		if err != nil {
			return err
		}
		bin := filepath.Join(dir, "busybox")
		return image.FileImage(bin, busyboxTar, busyboxImage, image.Config{Entrypoint: []string{"/busybox"}})
	})
	up := time.Now()
	node, err = cluster.Up(ctx, opts)
	Expect(err).NotTo(HaveOccurred())
	AddReportEntry("cluster up", time.Since(up).Round(100*time.Millisecond).String())
	DeferCleanup(func() {
		down := time.Now()
		Expect(node.Down()).To(Succeed())
		AddReportEntry("cluster down", time.Since(down).Round(100*time.Millisecond).String())
	})
	Expect(g.Wait()).To(Succeed())
	for _, tar := range []string{vendorTar, smsappTar, netprobeTar, busyboxTar, metadepTar, fleetclientTar} {
		logf("importing %s", tar)
		Expect(node.ImportImage(ctx, tar)).To(Succeed())
	}
	AddReportEntry("ready to install", time.Since(start).Round(time.Second).String())

	cs, err = kubernetes.NewForConfig(node.Config)
	Expect(err).NotTo(HaveOccurred())
	k8s, err = client.New(node.Config, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(40*time.Minute))
