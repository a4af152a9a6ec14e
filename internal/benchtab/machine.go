// The machine a table was measured on, as its outputs record it.

package benchtab

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

type machine struct {
	CPUs      int    `json:"nproc"`
	CPUModel  string `json:"cpu_model"`
	MemoryGiB string `json:"memory"`
	Go        string `json:"go"`
	OpenMPI   string `json:"open_mpi"`
	OS        string `json:"os"`
	Command   string `json:"command"`
	Date      string `json:"date"`
}

// machineInfo describes this machine now; Open MPI's version is the one
// scripts/bench.sh recorded in raw ("not found" without one).
func machineInfo(raw, command string) machine {
	m := machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		Command: command, Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), CPUModel: "unknown", MemoryGiB: "unknown", OpenMPI: "not found"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					m.MemoryGiB = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
			}
		}
	}
	if raw != "" {
		if b, err := os.ReadFile(filepath.Join(raw, "ompi-version.txt")); err == nil {
			m.OpenMPI = strings.TrimSpace(string(b))
		}
	}
	return m
}
