package transceiver_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

// TestVerifyModesOnACorruptFragment: a byte flipped on the way fails the
// transfer under full verification (the pattern) and under checksum (the
// CRC the sender computed before the flip); with verification off it
// completes, which is what off means. The other requests complete.
func TestVerifyModesOnACorruptFragment(t *testing.T) {
	for _, tc := range []struct {
		verify transceiver.Verify
		want   request.Status
		reason string
	}{
		{transceiver.VerifyFull, request.Failed, "does not hold the expected bytes"},
		{transceiver.VerifyChecksum, request.Failed, "payload checksum"},
		{transceiver.VerifyOff, request.Completed, ""},
	} {
		for _, path := range []string{"", "vector"} {
			t.Run(path+"/"+tc.verify.String(), func(t *testing.T) {
				o := setupOpts{ctx: "tp=2", gen: "tp=2", verify: tc.verify, path: path}
				o.faults = func(role topology.Role, rank int) *transceiver.Faults {
					if role == topology.Context && rank == 1 {
						return &transceiver.Faults{CorruptFragment: map[request.ID]bool{101: true}}
					}
					return nil
				}
				reqs := requests(3)
				var named atomic.Bool
				runRanks(t, o, func(ctx context.Context, r *rank) error {
					for _, q := range reqs {
						if err := start(r, q); err != nil {
							return err
						}
					}
					reaped, err := drain(ctx, r, len(reqs))
					if err != nil {
						return err
					}
					for _, x := range reaped {
						want, reason := request.Completed, ""
						if x.ID == 101 {
							want, reason = tc.want, tc.reason
						}
						if x.Status != want {
							return errorf("%s rank %d: request %d ended %s (%s), want %s", r.role, r.groups.Rank, x.ID, x.Status, x.Reason, want)
						}
						// The rank that caught it names the check; its peer
						// learns the failure from the agreement.
						if r.role == topology.Generation && reason != "" && strings.Contains(x.Reason, reason) {
							named.Store(true)
						}
					}
					return nil
				})
				if tc.reason != "" && !named.Load() {
					t.Fatalf("no gen rank failed request 101 naming %q", tc.reason)
				}
			})
		}
	}
}

func TestParseVerify(t *testing.T) {
	for _, s := range []string{"full", "checksum", "off"} {
		v, err := transceiver.ParseVerify(s)
		if err != nil || v.String() != s {
			t.Fatalf("ParseVerify(%q) = %v, %v", s, v, err)
		}
	}
	if _, err := transceiver.ParseVerify("crc"); err == nil || !strings.Contains(err.Error(), "full, checksum or off") {
		t.Fatalf("ParseVerify(crc): %v, want the valid names", err)
	}
}
