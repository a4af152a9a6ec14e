package local_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/comm/commtest"
	"github.com/rankrun/rankrun/comm/local"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type launcher struct{}

func (launcher) Sizes() []int { return []int{1, 2, 3, 4, 8} }

func (launcher) Launch(ctx context.Context, n int, o commtest.Options, fn commtest.RankFunc) error {
	return errors.Join(local.RunAll(ctx, n, local.Config{Checked: o.Checked, Timeout: o.Timeout}, local.RankFunc(fn))...)
}

func TestConformance(t *testing.T) { commtest.Run(t, launcher{}) }
