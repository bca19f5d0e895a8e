package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/gatekeeper/inert"
	"github.com/itocompute/itogate/gatekeeper/scenario"
)

func newDemoCmd(stdout, stderr io.Writer) *cobra.Command {
	var server string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start a development server and drive the admission cases through its HTTP API",
		Long: `Start "itogate serve" (development mode, a fresh temporary ledger) on a free
loopback port, drive the admission cases of fixtures/ through the real HTTP
API, print a table and stop the server. With --server it drives an already
running development server instead. Exit status 0 when every case answers as
expected, 1 if any case differs or the server fails, 4 on a bad flag.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			if server == "" {
				stop, url, err := startServer(ctx, stderr)
				if err != nil {
					return err
				}
				defer stop()
				server = url
			}
			return runDemo(ctx, stdout, server)
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "drive this running development server instead of starting one")
	return cmd
}

func runDemo(ctx context.Context, w io.Writer, server string) error {
	cases, err := scenario.LoadCases(fixtures.Cases(), "policy-cases.json")
	if err != nil {
		return err
	}
	r, err := scenario.New(server, fixtures.Manifests())
	if err != nil {
		return err
	}
	results := r.Run(ctx, cases)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tEXPECTED\tGOT\tRESULT")
	failed := 0
	for _, res := range results {
		mark := "ok"
		if !res.Pass {
			mark, failed = "FAIL", failed+1
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", inert.Text(res.Name), inert.Text(res.Expected), inert.Text(res.Got), mark)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d passed, %d failed\n", len(results)-failed, failed)
	if failed > 0 {
		return exitError{exitDemoFail}
	}
	return nil
}

// startServer runs this binary's serve command on a free loopback port with
// a temporary data directory and waits until /readyz answers 200.
func startServer(ctx context.Context, stderr io.Writer) (stop func(), url string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	dir, err := os.MkdirTemp("", "itogate-demo-")
	if err != nil {
		return nil, "", err
	}
	logf, err := os.Create(dir + "/server.log")
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(exe, "serve", "--listen", addr, "--data-dir", dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
		}
		logf.Close()
		os.RemoveAll(dir)
	}
	url = "http://" + addr
	fmt.Fprintf(stderr, "demo: started itogate serve on %s (log %s)\n", url, logf.Name())
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return stop, url, nil
			}
		}
		select {
		case <-ctx.Done():
			stop()
			return nil, "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	log, _ := os.ReadFile(logf.Name())
	stop()
	return nil, "", fmt.Errorf("server did not become ready: %s", strings.TrimSpace(string(log)))
}
