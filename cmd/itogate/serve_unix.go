//go:build unix

package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/itocompute/itogate/gatekeeper/runtime"
)

// backupOnSignal writes an online backup of a bbolt ledger on each SIGUSR1
// until ctx ends or the returned stop is called (README: "The ledger:
// check, migrations, backup"). Only the process's own user and root can
// send it.
func backupOnSignal(ctx context.Context, rt *runtime.Runtime) (stop func()) {
	backups := make(chan os.Signal, 1)
	signal.Notify(backups, syscall.SIGUSR1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-backups:
				_, _, _ = rt.BackupLedger(ctx) // logged
			}
		}
	}()
	return func() { signal.Stop(backups); close(done) }
}

// reloadSignal is SIGHUP, caught from notifyReload on.
type reloadSignal struct{ c chan os.Signal }

// notifyReload catches SIGHUP (whose default action would end the
// process); one signal arriving before serve is kept for it.
func notifyReload() reloadSignal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	return reloadSignal{c}
}

// stop stops catching SIGHUP.
func (r reloadSignal) stop() { signal.Stop(r.c) }

// serve calls reload on each SIGHUP, one at a time, until ctx ends or the
// returned stop is called; stop returns once a reload under way is done.
// Signals arriving during a reload are merged into one more reload.
func (r reloadSignal) serve(ctx context.Context, reload func()) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-r.c:
				reload()
			}
		}
	}()
	return func() { close(done); <-exited }
}
