// Command pause is the pod sandbox's process: it holds the pod's namespaces
// open and does nothing else until it is told to stop. It is built static so
// that its image needs no base.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
