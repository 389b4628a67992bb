// CoreDNS with only the plugins the test node's pods need: answers for Services and pods
// from the API server (kubernetes), bound to the node's bridge address (bind), with errors
// and queries logged (errors, log). kube/node.sh builds it; the stock binary links ~60.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
)

func main() { coremain.Run() }
