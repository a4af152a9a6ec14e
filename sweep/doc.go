// Package sweep holds the decisions of a layout sweep, apart from any
// command line: which CTX/GEN layout pairs a GPU budget allows (the
// placement search's grid), what one cell's runs measured against an SLO,
// each pair's goodput per GPU (DistServe's definition, over the rates
// swept) and the ranking that names the best placement, and a pool that
// runs every repeat of every cell, a given number at a time.
//
// What a run is stays the caller's: Run takes a Runner, so a Go user can
// run the cells in simulation (executor.Run on a launch.Sim), in this
// process (on a launch.Local) or anywhere else, and rankrun's sweep command is a
// thin shell over this package.
//
//	grid := sweep.Grid{GPUs: 8}
//	pairs, err := grid.Pairs(model.Geometry(16), &placement)
//	... build one executor.Config per pair and arrival, sweep.NewCell(cfg, 1) ...
//	done := sweep.Run(ctx, cells, sweep.Options{SLO: slo}, runner)
//	best := sweep.Ranked(sweep.Goodputs(done, slo))
package sweep
