package chaos

import (
	"fmt"
	"testing"

	"github.com/comfygate/comfygate/tests/peers/dnssrv"
)

// DNSName is the SRV name of the ComfyUI workers when the stack takes
// them from DNS (StackOptions.DNS): each record targets w.chaos.test
// (127.0.0.1) on one worker proxy's port.
const DNSName = "_comfyui._tcp.chaos.test"

// workersDNS is the pool's workers block for a DNS source at resolver.
func workersDNS(resolver string) string {
	return fmt.Sprintf("\t\t\tworkers dns %s {\n\t\t\t\tresolver %s\n\t\t\t\trefresh 200ms\n\t\t\t}\n", DNSName, resolver)
}

// startDNS serves DNSName with ports until the test ends.
func startDNS(t testing.TB, ports ...int) *dnssrv.Server {
	return dnssrv.Start(t, "chaos.test", ports...)
}
