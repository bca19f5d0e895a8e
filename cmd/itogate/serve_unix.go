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
