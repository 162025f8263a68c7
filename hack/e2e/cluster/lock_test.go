package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The asset script that downloads a package takes the suite's one package
// lock, by the same path (PackageLock is its one home; the script cannot
// import it).
func TestTheBusyboxScriptTakesThePackageLock(t *testing.T) {
	script, err := os.ReadFile(filepath.Join("..", "busybox-asset.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "${RETRYGUARD_APT_LOCK:-"+PackageLock+"}") {
		t.Fatalf("hack/e2e/busybox-asset.sh does not default its lock to %s", PackageLock)
	}
}
