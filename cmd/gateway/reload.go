package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/workers"
)

// reloadRequest asks the running gateway to read its config again; the
// outcome goes to done when it is set.
type reloadRequest struct {
	done chan<- error
}

// reloadable are the keys a reload applies. Any other key that changed is
// logged as needing a restart and keeps its running value.
var reloadable = map[string]bool{
	"workers":                           true,
	"admission.partitions":              true,
	"admission.default_partition":       true,
	"admission.partition_header":        true,
	"admission.queue.max_per_partition": true,
	"admission.queue.timeout":           true,
}

// reloadOnSIGHUP turns each SIGHUP into a reload request until ctx ends.
// Signals that arrive while a reload runs coalesce into one more. Once ctx
// ends (the gateway is shutting down) SIGHUP is ignored rather than handed
// back to its default action, which would kill the process and cut the
// requests the shutdown is draining.
func reloadOnSIGHUP(ctx context.Context) <-chan reloadRequest {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	out := make(chan reloadRequest)
	go func() {
		defer signal.Ignore(syscall.SIGHUP)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			}
			select {
			case out <- reloadRequest{}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// reloadLoop serves reload requests one at a time until ctx ends.
func (a *app) reloadLoop(ctx context.Context) {
	running := a.cfg
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-a.reloads:
			err := a.reload(&running)
			if req.done != nil {
				req.done <- err
			}
		}
	}
}

// reload reads the config as at startup (file < environment < flags) and,
// if it is valid, applies its reloadable keys to the running gateway. A bad
// config changes nothing: the error, which names every bad key, is logged
// and returned.
func (a *app) reload(running *config.Config) error {
	next, err := a.loadConfig()
	if err != nil {
		a.log.Error("config reload failed; keeping the running config", "error", err.Error())
		return err
	}
	var restart []string
	for _, key := range config.ChangedKeys(*running, next) {
		if !reloadable[key] {
			restart = append(restart, key)
		}
	}
	applied := *running
	applied.Workers = next.Workers
	applied.Admission.Partitions = next.Admission.Partitions
	applied.Admission.DefaultPartition = next.Admission.DefaultPartition
	applied.Admission.PartitionHeader = next.Admission.PartitionHeader
	applied.Admission.Queue = next.Admission.Queue
	// The new keys must also hold together with the running ones they
	// leave in place (seeding.partitions must name partitions, say).
	if err := applied.Validate(); err != nil {
		err = fmt.Errorf("the reloadable keys do not fit the running config: %w", err)
		a.log.Error("config reload failed; keeping the running config", "error", err.Error())
		return err
	}
	if len(restart) > 0 {
		a.log.Warn("config reload: changed keys need a restart and keep their running values", "keys", restart)
	}
	if !reflect.DeepEqual(running.Admission, applied.Admission) {
		if err := a.reloadAdmission(applied.Admission); err != nil {
			a.log.Error("config reload failed; keeping the running config", "error", err.Error())
			return err
		}
	}
	a.reconcileWorkers(applied.Workers)
	a.log.Info("config reloaded", "changed", config.ChangedKeys(*running, applied))
	*running = applied
	return nil
}

// reloadAdmission replaces the partitions, their weights and keys, and the
// queue limits: the scheduler is reconfigured in place (queues of
// partitions that stay are kept) and the API key resolver swapped whole.
// The admission mode itself needs a restart.
func (a *app) reloadAdmission(ac config.Admission) error {
	parts := admissionPartitions(ac)
	resolver, err := admission.NewResolver(parts, ac.DefaultPartition, ac.PartitionHeader)
	if err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	if a.scheduler == nil {
		a.gateway.SetPartitions(resolver)
		return nil
	}
	mode, err := admission.ParseMode(a.cfg.Admission.Mode)
	if err != nil {
		return err
	}
	// Three steps, so that no request meets a partition the scheduler does
	// not know: first the scheduler takes the new partitions while keeping
	// the old ones, then the resolver swaps, then the old ones go. Requests
	// still queued in a partition that goes fail with ErrUnknownPartition,
	// and the handler resolves their key again with the new resolver.
	union := schedulerConfig(ac, mode, parts)
	for _, old := range a.scheduler.Snapshot().Partitions {
		if !slices.ContainsFunc(parts, func(p admission.Partition) bool { return p.Name == old.Name }) {
			union.Partitions = append(union.Partitions, admission.Partition{Name: old.Name, Weight: old.Weight})
		}
	}
	if err := a.scheduler.Reconfigure(union); err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	a.gateway.SetPartitions(resolver)
	if len(union.Partitions) > len(parts) {
		if err := a.scheduler.Reconfigure(schedulerConfig(ac, mode, parts)); err != nil {
			return fmt.Errorf("admission: %w", err)
		}
	}
	return nil
}

// admissionPartitions are the configured partitions, or the default one alone.
func admissionPartitions(ac config.Admission) []admission.Partition {
	parts := make([]admission.Partition, 0, len(ac.Partitions))
	for _, p := range ac.Partitions {
		parts = append(parts, admission.Partition{Name: p.Name, Weight: p.Weight, APIKeys: p.APIKeys})
	}
	if len(parts) == 0 {
		parts = []admission.Partition{{Name: ac.DefaultPartition, Weight: 1}}
	}
	return parts
}

func schedulerConfig(ac config.Admission, mode admission.Mode, parts []admission.Partition) admission.Config {
	return admission.Config{
		Mode:                 mode,
		Partitions:           parts,
		DefaultPartition:     ac.DefaultPartition,
		MaxQueuePerPartition: ac.Queue.MaxPerPartition,
		QueueTimeout:         ac.Queue.Timeout,
		CreditTTL:            creditTTL,
	}
}

// creditTTL bounds a capacity credit from dispatch to the claim of its
// proof. The gateway redeems a credit in the same request, microseconds
// later: a proof older than this was kept or replayed, and fails.
const creditTTL = time.Minute

// reconcileWorkers makes the registry's config workers equal to desired,
// entry by entry through Registry.Apply (added, restored, updated in place
// or replaced), and retires those no longer listed (drained, then removed).
// Workers of other origins are never touched.
func (a *app) reconcileWorkers(desired []config.Worker) {
	want := make(map[string]bool, len(desired))
	var added, replaced, updated, draining []string
	for _, cw := range desired {
		s := configSpec(cw)
		want[s.ID] = true
		applied, err := a.registry.Apply(s)
		switch {
		case errors.Is(err, workers.ErrOtherOrigin):
			a.log.Warn("config reload: worker id held by a worker of another origin; entry skipped", "worker", s.ID)
		case err != nil:
			a.log.Error("config reload: worker not applied", "worker", s.ID, "error", err)
		case applied == workers.AppliedAdded, applied == workers.AppliedRestored:
			added = append(added, s.ID)
		case applied == workers.AppliedReplaced:
			replaced = append(replaced, s.ID)
		case applied == workers.AppliedUpdated:
			updated = append(updated, s.ID)
		}
	}
	for _, w := range a.registry.Workers() {
		if w.Origin() == workers.OriginConfig && !want[w.ID()] && !w.Removing() {
			if _, ok := a.registry.Retire(w.ID()); ok {
				draining = append(draining, w.ID())
			}
		}
	}
	if len(added)+len(replaced)+len(updated)+len(draining) > 0 {
		a.log.Info("config reload: workers changed", "added", strings.Join(added, ","), "replaced", strings.Join(replaced, ","),
			"updated", strings.Join(updated, ","), "draining", strings.Join(draining, ","))
	}
}
