package gpu

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/rankrun/rankrun/kvpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeNVML is an NVML for tests. Like the real library, it fails any call
// made without a successful Init (and counts such calls, which must be zero).
type fakeNVML struct {
	initErr, countErr error
	devices           []DeviceInfo
	deviceErr         map[int]error

	inited        bool
	calls         []string
	uninitedCalls int
}

func (f *fakeNVML) Init() error {
	f.calls = append(f.calls, "init")
	if f.initErr != nil {
		return f.initErr
	}
	f.inited = true
	return nil
}

func (f *fakeNVML) Shutdown() error {
	f.calls = append(f.calls, "shutdown")
	if !f.inited {
		f.uninitedCalls++
		return errors.New("fake: shutdown without init")
	}
	f.inited = false
	return nil
}

func (f *fakeNVML) DeviceCount() (int, error) {
	f.calls = append(f.calls, "count")
	if !f.inited {
		f.uninitedCalls++
		return 0, errors.New("fake: not initialised")
	}
	return len(f.devices), f.countErr
}

func (f *fakeNVML) Device(i int) (DeviceInfo, error) {
	f.calls = append(f.calls, fmt.Sprintf("device %d", i))
	if !f.inited {
		f.uninitedCalls++
		return DeviceInfo{}, errors.New("fake: not initialised")
	}
	if err := f.deviceErr[i]; err != nil {
		return DeviceInfo{}, err
	}
	return f.devices[i], nil
}

const gib = 1 << 30

func twoGPUs() *fakeNVML {
	return &fakeNVML{devices: []DeviceInfo{
		{Index: 0, Name: "NVIDIA H200", UUID: "GPU-0000", MemTotal: 141 * gib, MemFree: 100 * gib},
		{Index: 1, Name: "NVIDIA H200", UUID: "GPU-1111", MemTotal: 141 * gib, MemFree: 40 * gib},
	}}
}

func TestDiscoverFake(t *testing.T) {
	f := twoGPUs()
	d := discoverGPUs(f)
	assert.True(t, d.Available)
	assert.Empty(t, d.Reason)
	assert.Equal(t, f.devices, d.Devices)
	assert.Equal(t, []string{"init", "count", "device 0", "device 1", "shutdown"}, f.calls)
	assert.Zero(t, f.uninitedCalls)

	for _, tc := range []struct {
		name   string
		f      *fakeNVML
		reason string
		calls  []string
	}{
		{"init fails: nothing else is called", &fakeNVML{initErr: errors.New("nvml: init: ERROR_LIBRARY_NOT_FOUND")},
			"no NVIDIA GPU: nvml: init: ERROR_LIBRARY_NOT_FOUND", []string{"init"}},
		{"zero devices", &fakeNVML{}, "no NVIDIA GPU: NVML reports 0 devices", []string{"init", "count", "shutdown"}},
		{"count fails", &fakeNVML{devices: make([]DeviceInfo, 1), countErr: errors.New("ERROR_UNKNOWN")},
			"no NVIDIA GPU: ERROR_UNKNOWN", []string{"init", "count", "shutdown"}},
		{"a device fails", &fakeNVML{devices: make([]DeviceInfo, 2), deviceErr: map[int]error{1: errors.New("ERROR_GPU_IS_LOST")}},
			"no NVIDIA GPU: 2 devices, but: ERROR_GPU_IS_LOST", []string{"init", "count", "device 0", "device 1", "shutdown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := discoverGPUs(tc.f)
			assert.False(t, d.Available)
			assert.Empty(t, d.Devices)
			assert.Equal(t, tc.reason, d.Reason)
			assert.Equal(t, tc.calls, tc.f.calls)
			assert.Zero(t, tc.f.uninitedCalls)
		})
	}
}

func TestBindRank(t *testing.T) {
	d := discoverGPUs(twoGPUs())
	for rank, want := range []string{"GPU-0000", "GPU-1111", "GPU-0000", "GPU-1111"} {
		dev, err := BindRank(d, rank)
		require.NoError(t, err)
		assert.Equal(t, want, dev.UUID)
		assert.Equal(t, rank%2, dev.Index)
	}
	_, err := BindRank(d, -1)
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = BindRank(Discovery{Reason: "no NVIDIA GPU: x"}, 0)
	assert.ErrorIs(t, err, ErrNoDevice)
	assert.EqualError(t, err, "gpu: bind local rank 0: gpu: no GPU device (no NVIDIA GPU: x)")
}

func TestPlanPool(t *testing.T) {
	gpus := discoverGPUs(twoGPUs())
	gpus.HostMemAvailable = 8 * gib
	host := Discovery{Reason: "no NVIDIA GPU: nvml: init: ERROR_LIBRARY_NOT_FOUND", HostMemAvailable: 8 * gib}

	p, err := PlanPool(gpus, 1, 0.5, 1*gib, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, SourceGPU, p.Source)
	require.NotNil(t, p.Device)
	assert.Equal(t, "GPU-1111", p.Device.UUID)
	assert.Equal(t, 20*1024, p.Blocks) // half of 40 GiB in 1 MiB blocks
	assert.Equal(t, int64(20*gib), p.Bytes)
	assert.Contains(t, p.Reason, "GPU 1")
	assert.Equal(t, kvpool.PoolConfig{Blocks: 20 * 1024, BlockBytes: 1 << 20, Name: "r1"}, p.Config("r1", 1<<20))

	p, err = PlanPool(host, 3, 0.9, 1000, 300)
	require.NoError(t, err)
	assert.Equal(t, SourceHost, p.Source)
	assert.Nil(t, p.Device)
	assert.Equal(t, 3, p.Blocks)
	assert.Equal(t, int64(900), p.Bytes)
	assert.Contains(t, p.Reason, "ERROR_LIBRARY_NOT_FOUND")

	// Unknown host memory: no host check.
	_, err = PlanPool(Discovery{}, 0, 1, 64*gib, 1<<20)
	require.NoError(t, err)

	// Blocks are capped at MaxInt32.
	huge := Discovery{Available: true, Devices: []DeviceInfo{{MemFree: 1 << 40}}}
	p, err = PlanPool(huge, 0, 1, 1, 1)
	require.NoError(t, err)
	assert.Equal(t, math.MaxInt32, p.Blocks)

	for _, tc := range []struct {
		name      string
		d         Discovery
		rank      int
		fraction  float64
		hostBytes int64
		block     int
		want      string
	}{
		{"fraction zero", gpus, 0, 0, 1, 1, "fraction must be in (0, 1] (got 0)"},
		{"fraction above one", host, 0, 1.5, 1, 1, "fraction must be in (0, 1] (got 1.5)"},
		{"fraction NaN", host, 0, math.NaN(), 1, 1, "fraction must be in (0, 1] (got NaN)"},
		{"fraction negative", gpus, 0, -0.1, 1, 1, "fraction must be in (0, 1]"},
		{"host zero", host, 0, 0.5, 0, 1, "hostBytes must be positive (got 0)"},
		{"host negative even with a GPU", gpus, 0, 0.5, -5, 1, "hostBytes must be positive (got -5)"},
		{"block zero", host, 0, 0.5, 100, 0, "blockBytes must be positive (got 0)"},
		{"block negative", gpus, 0, 0.5, 100, -1, "blockBytes must be positive (got -1)"},
		{"rank negative", gpus, -1, 0.5, 100, 1, "localRank must not be negative (got -1)"},
		{"block bigger than host budget", host, 0, 0.5, 100, 101, "blockBytes 101 exceeds the host budget of 100 bytes"},
		{"block bigger than gpu budget", gpus, 1, 1e-9, 100, 1 << 20, "blockBytes 1048576 exceeds the gpu budget of 42 bytes"},
		{"host bigger than the machine", host, 0, 0.5, 9 * gib, 1, "hostBytes 9663676416 exceeds the host's available memory (8589934592 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PlanPool(tc.d, tc.rank, tc.fraction, tc.hostBytes, tc.block)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestParseMemAvailable(t *testing.T) {
	n, err := ParseMemAvailable(strings.NewReader("MemTotal:       16384000 kB\nMemFree:  100 kB\nMemAvailable:    8000000 kB\n"))
	require.NoError(t, err)
	assert.Equal(t, int64(8000000*1024), n)
	for _, in := range []string{"", "MemTotal: 1 kB\n", "MemAvailable: x kB\n", "MemAvailable: 12\n", "MemAvailable: -1 kB\n"} {
		_, err := ParseMemAvailable(strings.NewReader(in))
		assert.ErrorIs(t, err, ErrInvalid, in)
	}
}

// TestRealNVML runs the real library. Without a driver (CI, this project's
// build machines) Discover must report Available=false with NVML's reason,
// and the process must survive (no NVML call after a failed Init). With a
// GPU, every device must have a name, a UUID and memory figures.
func TestRealNVML(t *testing.T) {
	d := Discover(NewNVML())
	t.Logf("discovery: available=%v reason=%q devices=%+v host=%d", d.Available, d.Reason, d.Devices, d.HostMemAvailable)
	if !d.Available {
		assert.Empty(t, d.Devices)
		assert.True(t, strings.HasPrefix(d.Reason, "no NVIDIA GPU: "), d.Reason)
		assert.Greater(t, len(d.Reason), len("no NVIDIA GPU: "))
		plan, err := PlanPool(d, 0, 0.9, 1<<20, 4096)
		require.NoError(t, err)
		assert.Equal(t, SourceHost, plan.Source)
		return
	}
	require.NotEmpty(t, d.Devices)
	for i, dev := range d.Devices {
		assert.Equal(t, i, dev.Index)
		assert.NotEmpty(t, dev.Name)
		assert.True(t, strings.HasPrefix(dev.UUID, "GPU-"), dev.UUID)
		assert.Greater(t, dev.MemTotal, uint64(0))
		assert.LessOrEqual(t, dev.MemFree, dev.MemTotal)
	}
	plan, err := PlanPool(d, 0, 0.01, 1<<20, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, SourceGPU, plan.Source)
	assert.Greater(t, plan.Blocks, 0)
}

// TestRealNVMLGate checks the real implementation refuses every call before
// a successful Init, without touching the library.
func TestRealNVMLGate(t *testing.T) {
	n := NewNVML()
	_, err := n.DeviceCount()
	assert.ErrorIs(t, err, ErrNVML)
	_, err = n.Device(0)
	assert.ErrorIs(t, err, ErrNVML)
	assert.ErrorIs(t, n.Shutdown(), ErrNVML)
	if err := n.Init(); err != nil {
		assert.ErrorIs(t, err, ErrNVML)
		_, err = n.DeviceCount() // would kill the process if it reached NVML
		assert.ErrorContains(t, err, "not initialised")
		return
	}
	defer func() { assert.NoError(t, n.Shutdown()) }()
	assert.ErrorContains(t, n.Init(), "already initialised")
	_, err = n.Device(-1)
	assert.ErrorIs(t, err, ErrNVML)
}
