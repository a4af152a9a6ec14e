package scenario

import (
	"fmt"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/runspec"
)

// FromSpec is the run f describes, as a scenario named name and judged by
// expects (default: the run completes, every request with it when no
// fault is injected): the inverse of Spec, for a run given as flags that
// a scenario's runner (explore) takes. Its errors name the flag.
func FromSpec(name string, f runspec.Spec, expects []string) (Scenario, error) {
	cfg, err := f.Config()
	if err != nil {
		return Scenario{}, err
	}
	s := New(name)
	s.Ctx, s.Gen = cfg.Ctx.String(), cfg.Gen.String()
	s.Model, s.Transfer, s.Routing = cfg.Model, cfg.Mode.String(), cfg.Routing
	s.Requests, s.Input, s.Output, s.InputJitter = cfg.Workload.Requests, f.Input, f.Output, f.InputJitter
	s.Arrival, s.Seed = cfg.Workload.Arrival.String(), f.Seed
	s.PrefillPerToken, s.DecodePerStep = f.PrefillPerToken, f.DecodePerStep
	s.CtxBlocks, s.GenBlocks = f.CtxBlocks, f.GenBlocks
	// The step scheduler as given (a scenario's default is no limit, the
	// CLI's a serving engine's: only the flags given carry over).
	if f.Set["max-batch"] {
		s.MaxBatch = f.MaxBatch
	}
	if f.Set["max-tokens"] {
		s.MaxTokens = f.MaxTokens
	}
	if s.Chunked = f.Chunked; s.Chunked && s.MaxTokens == 0 {
		return Scenario{}, runspec.Errorf("--chunked: explore needs --max-tokens N (the budget its chunks fill; a scenario has no limit by default)")
	}
	s.SenderWaitSlice, s.GenPollInterval, s.TransferTimeout = f.SenderWaitSlice, f.GenPollInterval, f.TransferTimeout
	s.IdleTick, s.StallTimeout, s.CollectiveTimeout, s.Timeout = f.IdleTick, f.StallTimeout, f.CollectiveTimeout, f.Timeout
	// A scenario names a fabric preset; it has no model key.
	if f.ModelName != "" {
		return Scenario{}, runspec.Errorf("--model: explore runs a scenario, which has no cost model key; drop --model (use --prefill-per-token / --decode-per-step)")
	}
	hw, err := f.HardwareProfile()
	if err != nil {
		return Scenario{}, err
	}
	if costmodel.IsFile(f.Hardware) {
		return Scenario{}, runspec.Errorf("--hardware %s: explore takes a preset name, not a file", f.Hardware)
	}
	s.Hardware = hw.Name
	for _, r := range executor.Replays {
		if cfg.Replays.On(r) {
			s.Replays = append(s.Replays, r)
		}
	}
	s.Faults = append(s.Faults, f.Faults...)
	if len(expects) == 0 {
		expects = []string{"ok"}
		if len(s.Faults) == 0 {
			expects = append(expects, fmt.Sprintf("completed == %d", s.Requests))
		}
	}
	for _, e := range expects {
		if err := s.Expect.Add(e); err != nil {
			return s, runspec.Errorf("--expect %q: %v", e, err)
		}
	}
	if err := s.Expect.Validate(); err != nil {
		return s, runspec.Errorf("--expect: %v", err)
	}
	if _, err := s.Config(false); err != nil {
		return s, err
	}
	return s, nil
}
