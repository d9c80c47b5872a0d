// Command modproxy publishes a commit of this checkout as a module version
// in a file-based Go module proxy, so that xcaddy can build comfygate from a
// checkout that is not published:
//
//	go run ./cmd/modproxy -dir /tmp/comfygate-proxy
//
// prints the version (github.com/comfygate/comfygate@v0.0.0-<time>-<commit>)
// and the environment that points the go command at the proxy. Only
// committed files are published (git archive of -rev, default HEAD).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/comfygate/comfygate/internal/modproxy"
)

func main() {
	dir := flag.String("dir", "", "proxy directory to write into (created if missing)")
	rev := flag.String("rev", "HEAD", "git revision to publish")
	repo := flag.String("repo", ".", "the git checkout to publish from")
	flag.Parse()
	if *dir == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: modproxy -dir <proxy dir> [-rev <revision>] [-repo <checkout>]")
		os.Exit(2)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
	mv, err := modproxy.Publish(*repo, *rev, abs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
	fmt.Printf("published %s@%s\n\n", mv.Path, mv.Version)
	fmt.Printf("export GOPROXY=file://%s,$(go env GOPROXY)\n", abs)
	fmt.Printf("export GONOSUMDB=%s\n", mv.Path)
}
