package transceiver_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
		{transceiver.VerifyChecksum, request.Failed, "payload digest"},
		{transceiver.VerifyOff, request.Completed, ""},
	} {
		for _, path := range []string{"", "vector"} {
			t.Run(path+"/"+tc.verify.String(), func(t *testing.T) {
				o := setupOpts{ctx: "tp=2", gen: "tp=2", verify: tc.verify, path: path}
				o.faults = func(role topology.Role, rank int) *transceiver.Faults {
					if role == topology.Context && rank == 1 {
						return &transceiver.Faults{CorruptFragment: map[request.ID]transceiver.CorruptAt{101: {}}}
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

// A corrupt byte is caught wherever it lies in a fragment, on every data
// path, by full verification and by the digest of --verify checksum; full
// verification names exactly where: the fragment's first and last
// block, layer, K and V, head and token (the payload's first and last byte
// and mixed corners), from the group's first and its last CTX rank, lent
// (in-process), received in place (MPI's vectored path) and packed (the
// simulator's). A check that skipped any part of a run, or named the wrong
// place, fails here.
func TestCorruptionIsCaughtAndNamedAtEveryPosition(t *testing.T) {
	const id = 101 // 14 tokens: blocks 0 and 1 of 8 tokens
	type pos struct {
		at                      string
		block, layer, head, tok int // in the fragment of heads [lo, lo+4): head is its index there
		v                       bool
	}
	positions := []pos{
		{at: "first", block: 0, layer: 0, head: 0, tok: 0},
		{at: "last", block: 1, layer: 3, head: 3, tok: 7, v: true},
		{at: "first/last/v/first/last", block: 0, layer: 3, head: 0, tok: 7, v: true},
		{at: "last/first/k/last/first", block: 1, layer: 0, head: 3, tok: 0},
	}
	for _, verify := range []transceiver.Verify{transceiver.VerifyFull, transceiver.VerifyChecksum} {
		for _, path := range []string{"", "vector", "pack"} {
			for _, sender := range []int{0, 1} { // ctx tp=2: the group's first and last rank
				for _, p := range positions {
					name := path
					if name == "" {
						name = "lent"
					}
					t.Run(fmt.Sprintf("%s/%s/ctx%d/%s", verify, name, sender, p.at), func(t *testing.T) {
						at, err := transceiver.ParseCorruptAt(p.at)
						if err != nil {
							t.Fatal(err)
						}
						o := setupOpts{ctx: "tp=2", gen: "tp=2", verify: verify, path: path}
						o.faults = func(role topology.Role, rank int) *transceiver.Faults {
							if role == topology.Context && rank == sender {
								return &transceiver.Faults{CorruptFragment: map[request.ID]transceiver.CorruptAt{id: at}}
							}
							return nil
						}
						kv := topology.K
						if p.v {
							kv = topology.V
						}
						// ctx rank r sends heads [4r, 4r+4) to gen rank r.
						want := fmt.Sprintf("request %d block %d from ctx rank %d: layer %d %v head %d token %d of the block (request token %d) does not hold the expected bytes",
							id, p.block, sender, p.layer, kv, 4*sender+p.head, p.tok, 8*p.block+p.tok)
						if verify == transceiver.VerifyChecksum {
							// A digest says that, not where.
							want = fmt.Sprintf("request %d fragment from ctx rank %d: payload digest ", id, sender)
						}
						reqs := requests(3)
						var named atomic.Bool
						var got atomic.Value
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
								wantStatus := request.Completed
								if x.ID == id {
									wantStatus = request.Failed
								}
								if x.Status != wantStatus {
									return errorf("%s rank %d: request %d ended %s (%s), want %s", r.role, r.groups.Rank, x.ID, x.Status, x.Reason, wantStatus)
								}
								if x.ID == id && r.role == topology.Generation && r.groups.Rank == sender {
									got.Store(x.Reason)
									named.Store(strings.Contains(x.Reason, want))
								}
							}
							return nil
						})
						if !named.Load() {
							t.Fatalf("gen rank %d did not name the corrupt place\n got: %v\nwant: %s", sender, got.Load(), want)
						}
					})
				}
			}
		}
	}
}

// A fragment whose digest never comes (--verify checksum) is not verified:
// its bytes are in, no write is in flight, and at the transfer deadline the
// GEN rank fails the request naming the missing digest; the others
// complete, nothing stays pinned.
func TestChecksumFragmentWithoutItsDigestFailsAtTheDeadline(t *testing.T) {
	o := setupOpts{ctx: "tp=2", gen: "tp=2", verify: transceiver.VerifyChecksum, timeout: 2 * time.Second, bound: 20 * time.Second}
	o.faults = func(role topology.Role, rank int) *transceiver.Faults {
		if role == topology.Context && rank == 1 {
			return &transceiver.Faults{DropDigest: map[request.ID]bool{101: true}}
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
			if x.ID != 101 && x.Status != request.Completed {
				return errorf("%s rank %d: request %d ended %s (%s), want completed", r.role, r.groups.Rank, x.ID, x.Status, x.Reason)
			}
			if x.ID == 101 && x.Status == request.Completed {
				return errorf("%s rank %d: request 101 completed without its digest", r.role, r.groups.Rank)
			}
			r.t.Logf("%s rank %d: request %d %s: %s", r.role, r.groups.Rank, x.ID, x.Status, x.Reason)
			if x.ID == 101 && strings.Contains(x.Reason, "from ctx rank 1: no payload digest by the transfer deadline") {
				named.Store(true)
			}
		}
		return nil
	})
	if !named.Load() {
		t.Fatal("no gen rank failed request 101 naming the missing digest")
	}
}
