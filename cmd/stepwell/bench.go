package main

import (
	"context"
	"flag"
	"strconv"

	"github.com/stepwell/stepwell/internal/bench"
)

func benchCommand() *command {
	var cfg bench.Config
	var quiet bool
	return &command{
		name:     "bench",
		synopsis: "[--scenario saturate|steady|recovery|idle] [--runs N] [--steps K] [--cluster N] [flags]",
		help: `Runs a synthetic workload through a real Runtime on the store and prints
what it achieved and what it cost: step transitions/s, runs/s, submits/s,
run latency p50/p99/max, added latency per step, object-store requests and
bytes written per transition, transactions per WAL object, peak heap and
RSS. Scenarios: saturate (closed loop, capacity), steady (open loop at
--rate runs/s, latency), recovery (reopen a store holding --live-jobs
pending runs and --history finished ones), idle (requests per minute of an
idle Runtime). Without --store it uses a fresh in-memory store; "file://"
alone means a new temporary directory.

--cluster N runs saturate or steady in cluster mode: a writer process that
runs no steps and N member processes (this program, re-executed), each
with a Runtime of --concurrency slots submitting its share of the runs
(--submitters and --rate are split between them); it adds the members'
calls to the writer per transition, and then times a failover (SIGKILL of
the writer) and a clean hand-over (--failover=false skips them). Not for
mem:// stores. The bench uses queues of its own and
leaves its run records behind: point it at a store (or prefix) of its own.
A progress line goes to stderr. See docs/BENCHMARKS.md.
`,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&cfg.Scenario, "scenario", "saturate", "saturate, steady, recovery or idle")
			fs.IntVar(&cfg.Runs, "runs", 1000, "runs to submit (saturate, steady)")
			fs.IntVar(&cfg.Steps, "steps", 3, "steps per run")
			fs.IntVar(&cfg.PayloadSize, "payload", 64, "payload `bytes` per step")
			fs.DurationVar(&cfg.StepDuration, "step-duration", 0, "simulated work per step")
			fs.IntVar(&cfg.Concurrency, "concurrency", 32, "steps executing at once")
			fs.IntVar(&cfg.NotifyConcurrency, "notify-concurrency", 0, "hook calls at once (0: --concurrency)")
			fs.IntVar(&cfg.Submitters, "submitters", 32, "concurrent submitters (saturate)")
			fs.Float64Var(&cfg.Rate, "rate", 0, "arrival rate in runs/s (steady)")
			fs.IntVar(&cfg.LiveJobs, "live-jobs", 100000, "pending runs to build (recovery)")
			fs.IntVar(&cfg.History, "history", 0, "finished runs to build first (recovery)")
			fs.DurationVar(&cfg.IdleFor, "idle-for", 0, "how long to observe (idle; 0: 30s)")
			fs.IntVar(&cfg.HotKeyLimit, "hot-key-limit", 0, "submit every run with one concurrency key of this `Limit` (0: none)")
			fs.IntVar(&cfg.Cluster, "cluster", 0, "run across a writer and `N` member processes (saturate, steady)")
			fs.BoolFunc("failover", "with --cluster: time a failover and a hand-over (default true)", func(v string) error {
				b, err := strconv.ParseBool(v)
				cfg.NoFailover = !b
				return err
			})
			fs.BoolVar(&quiet, "quiet", false, "no progress line")
		},
		exec: func(ctx context.Context, c *cli, _ []string) error {
			cfg.Store = c.store
			if cfg.Store == "" {
				cfg.Store = c.env("STEPWELL_STORE")
			}
			if !quiet {
				cfg.Progress = c.progress
			}
			if _, err := cfg.Normalize(); err != nil {
				return usageError("%v", err)
			}
			res, err := bench.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if c.asJSON {
				return writeJSON(c.stdout, res)
			}
			return res.WriteTable(c.stdout)
		},
	}
}
