//go:build !unix

package main

import (
	"context"

	"github.com/itocompute/itogate/gatekeeper/runtime"
)

// backupOnSignal: no SIGUSR1 here; take a backup of a stopped server's file.
func backupOnSignal(context.Context, *runtime.Runtime) (stop func()) { return func() {} }

// reloadSignal: no SIGHUP here; restart to reload the keys.
type reloadSignal struct{}

func notifyReload() reloadSignal                                 { return reloadSignal{} }
func (reloadSignal) stop()                                       {}
func (reloadSignal) serve(context.Context, func()) (stop func()) { return func() {} }
