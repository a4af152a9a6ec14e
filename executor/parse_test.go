package executor

import (
	"strings"
	"testing"
)

func TestParseFaultErrorsNameTheProblem(t *testing.T) {
	for spec, want := range map[string]string{
		"":                           "want KIND@ROLE:RANK",
		"explode@gen:1":              "valid faults are fail-transfer",
		"stall@cpu:1":                `role "cpu": must be ctx or gen`,
		"stall@gen:-1":               `rank "-1"`,
		"stall@gen":                  "want ROLE:RANK",
		"stall@gen:1,for=soon":       `for="soon"`,
		"fail-transfer@gen:1,req=0":  `req="0"`,
		"shrink-pool@ctx:0,blocks=x": `blocks="x"`,
		"cancel@ctx:0,color=red":     "valid options are req, for, blocks, at",
		"corrupt@ctx:0,req=1,at=top": `at=: corrupt position "top": want mid, first, last or block/layer/kv/head/token`,
		"corrupt@ctx:0,req=1,at=first/last/x/first/last": `axis 3 (kv) is "x", want k or v`,
		"cancel@ctx:0,req": "want key=value",
	} {
		_, err := ParseFault(spec)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseFault(%q) = %v, want an error containing %q", spec, err, want)
		}
	}
	f, err := ParseFault("stall@ctx:1,req=3,for=250ms")
	if err != nil || f.Kind != FaultStall || f.Rank != 1 || f.Request != 3 || f.Duration.Milliseconds() != 250 {
		t.Fatalf("valid fault: %+v, %v", f, err)
	}
	if g, err := ParseFault(f.String()); err != nil || g != f {
		t.Fatalf("round trip: %+v, %v", g, err)
	}
	c, err := ParseFault("corrupt@ctx:1,req=2,at=last/first/v/last/first")
	if err != nil || !c.CorruptAt.At || !c.CorruptAt.LastBlock || c.CorruptAt.LastLayer || !c.CorruptAt.V || !c.CorruptAt.LastHead || c.CorruptAt.LastToken {
		t.Fatalf("corrupt at a position: %+v, %v", c, err)
	}
	if g, err := ParseFault(c.String()); err != nil || g.CorruptAt != c.CorruptAt || g.String() != c.String() {
		t.Fatalf("round trip: %+v (%s), %v", g, g, err)
	}
	// at= is corrupt's alone, checked where the fault meets the run.
	bad, err := ParseFault("stall@gen:0,req=1,for=1s,at=first")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Workload: Workload{Requests: 4}}
	if err := bad.validateOptions(&cfg); err == nil || !strings.Contains(err.Error(), "at= does not apply to stall (only to corrupt)") {
		t.Fatalf("at= on a stall: %v", err)
	}
}

func TestParseArrivalAndReplay(t *testing.T) {
	for _, ok := range []string{"burst", "rate=100", "poisson=2.5", "closed=1"} {
		a, err := ParseArrival(ok)
		if err != nil || a.String() != ok {
			t.Errorf("ParseArrival(%q) = %v, %v", ok, a, err)
		}
	}
	for _, bad := range []string{"", "rate=0", "rate=-1", "closed=0", "closed=x", "fast", "poisson=1e99"} {
		if _, err := ParseArrival(bad); err == nil || !strings.Contains(err.Error(), "use burst, rate=R") {
			t.Errorf("ParseArrival(%q) = %v, want an error listing the patterns", bad, err)
		}
	}
	if _, err := ParseReplay("clamp-less"); err == nil || !strings.Contains(err.Error(), "unclamped-poll, no-idle-reap") {
		t.Errorf("unknown replay: %v", err)
	}
}

func FuzzParseFault(f *testing.F) {
	for _, s := range []string{"stall@ctx:1,req=3,for=250ms", "shrink-pool@gen:0,blocks=4", "x@y:z", "exit@gen:2,req=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ft, err := ParseFault(s)
		if err != nil {
			return
		}
		g, err := ParseFault(ft.String())
		if err != nil || g != ft {
			t.Fatalf("%q parsed to %+v which does not round-trip: %+v, %v", s, ft, g, err)
		}
	})
}

func FuzzParseArrival(f *testing.F) {
	for _, s := range []string{"burst", "rate=100", "closed=3", "poisson=0.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseArrival(s)
		if err != nil {
			return
		}
		if b, err := ParseArrival(a.String()); err != nil || b != a {
			t.Fatalf("%q -> %+v does not round-trip: %+v, %v", s, a, b, err)
		}
	})
}
