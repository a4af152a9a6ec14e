// Package goodputout is rankrun goodput's result as the command prints
// it: the Report of one layout pair's search (its JSON is the command's
// --json, field for field) and its text, byte for byte.
//
// It owns the report's fields and wording, which name rankrun's flags
// where they hint at one (--requests): it is the CLI's. It does not know
// the command line or how a probe runs: the search is package goodput's
// (goodput.Find, its Result and the attainment's interval), the probes'
// configuration the caller's, and it parses no flag and decides no exit
// code.
package goodputout
