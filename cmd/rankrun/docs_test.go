package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The repository root, from this package's directory.
const repoRoot = "../.."

// Every file `rankrun scenario -h` names exists, it points to the format
// reference, and boolean flags are shown without an argument.
func TestScenarioHelp(t *testing.T) {
	code, _, help := cli(t, "scenario", "-h")
	require.Equal(t, 0, code)
	paths := regexp.MustCompile(`[\w./-]+\.(?:txt|md)\b`).FindAllString(help, -1)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		_, err := os.Stat(filepath.Join(repoRoot, p))
		assert.NoError(t, err, "scenario -h names %s", p)
	}
	assert.Contains(t, help, "scenario/FORMAT.md")
	assert.Contains(t, help, "two spaces or a tab")
	for _, b := range []string{"print-run", "with-replay", "replay-on", "v"} {
		assert.Regexp(t, `(?m)^  -`+b+`[\n\t]`, help, "-%s is a boolean: no argument shown", b)
	}
	ref, err := os.ReadFile(filepath.Join(repoRoot, "scenario/FORMAT.md"))
	require.NoError(t, err)
	assert.Contains(t, string(ref), "two or more spaces or a\n  tab")
}

// `rankrun foo`, `rankrun -h`, the package doc and the README list every
// command `rankrun -h` names, and each but version has -h.
func TestEveryCommandListed(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	mainGo, err := os.ReadFile("main.go")
	require.NoError(t, err)
	pkgDoc := string(mainGo)[:strings.Index(string(mainGo), "package main")]
	list := commandList("")
	require.Len(t, strings.Split(strings.TrimSpace(list), "\n"), len(commands))
	block := regexp.MustCompile("(?s)## Commands\n\n```\n(.*?)```").FindStringSubmatch(string(readme))
	require.NotNil(t, block, "README has a ## Commands block")
	assert.Equal(t, list, block[1], "README's command list is commandList(\"\"): paste it from rankrun -h")
	assert.Contains(t, pkgDoc, commandList("//\t"), "cmd/rankrun's package doc lists the commands as rankrun -h does")
	_, top, _ := cli(t, "-h")
	assert.Contains(t, top, commandList("  "), "rankrun -h")
	_, _, unknown := cli(t, "foo")
	for _, c := range commands {
		assert.Contains(t, unknown, c.name, "rankrun foo")
		if c.name == "version" {
			continue
		}
		code, _, errOut := cli(t, c.name, "-h")
		assert.Equal(t, 0, code, "%s -h: %s", c.name, errOut)
		assert.True(t, strings.HasPrefix(errOut, "Usage: rankrun "+c.name), "%s -h", c.name)
	}
}

// No issue numbers in the code or the generated docs: they mean nothing
// to a reader of the repository (upstream references, such as TensorRT-LLM
// #18267, cite their source and stay).
func TestNoIssueNumbers(t *testing.T) {
	files, err := exec.Command("git", "-C", repoRoot, "ls-files", "*.go", "BENCHMARKS.md").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a checkout)", err)
	}
	issue := regexp.MustCompile(`(?i)\bissues? \d+`)
	for _, f := range strings.Fields(string(files)) {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			assert.False(t, issue.MatchString(line), "%s:%d: %s", f, i+1, strings.TrimSpace(line))
		}
	}
}

// executor's package doc maps every file of the package.
func TestExecutorFileMap(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "executor/doc.go"))
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(repoRoot, "executor/*.go"))
	require.NoError(t, err)
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasSuffix(name, "_test.go") || name == "doc.go" {
			continue
		}
		assert.Regexp(t, `(?m)^//\t.*\b`+regexp.QuoteMeta(name), string(doc), "executor/doc.go's file map lacks %s", name)
	}
}

// Arrows point one way: the cost model prices links through package
// fabric, never through a backend.
func TestCostModelImportsNoBackend(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/rankrun/rankrun/costmodel").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/rankrun/rankrun/fabric")
	for _, b := range []string{"comm/sim", "comm/local", "comm/mpi"} {
		require.NotContains(t, deps, "github.com/rankrun/rankrun/"+b)
	}
}

// The executor depends on comm alone: a run's backend is its caller's
// (launch.Local, launch.Sim, an MPI world through RunRank).
func TestExecutorImportsNoBackend(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/rankrun/rankrun/executor").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/rankrun/rankrun/comm")
	for _, b := range []string{"comm/sim", "comm/local", "comm/mpi", "launch"} {
		require.NotContains(t, deps, "github.com/rankrun/rankrun/"+b)
	}
}

// The default build compiles no C outside the standard library: the KV
// pool is pure Go (kvpool), the MPI binding and go-nvml sit behind the mpi
// and nvml tags, so a plain go build is quiet on a cold cache and
// CGO_ENABLED=0 builds the whole command. With -tags nvml, go-nvml is in.
func TestDefaultBuildCompilesNoC(t *testing.T) {
	cgoDeps := func(tags ...string) []string {
		args := append([]string{"list", "-deps", "-f", "{{if and (not .Standard) .CgoFiles}}{{.ImportPath}}{{end}}"}, tags...)
		out, err := exec.Command("go", append(args, "github.com/rankrun/rankrun/cmd/rankrun")...).Output()
		if err != nil {
			t.Skipf("go list: %v", err)
		}
		return strings.Fields(string(out))
	}
	assert.Empty(t, cgoDeps(), "packages with C in the default build of cmd/rankrun")
	assert.Contains(t, cgoDeps("-tags", "nvml"), "github.com/NVIDIA/go-nvml/pkg/nvml")
	pool, err := exec.Command("go", "list", "-deps", "github.com/rankrun/rankrun/executor").Output()
	require.NoError(t, err)
	assert.NotContains(t, strings.Fields(string(pool)), "github.com/rankrun/rankrun/gpu", "the executor needs the pool, not the device side")
}

// The product carries no test tooling: explore's testing.TB helper and its
// -rankrun.* flags live in explore/exploretest, which only tests import.
func TestProductHasNoTestTooling(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/rankrun/rankrun/cmd/rankrun").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/rankrun/rankrun/explore")
	for _, p := range []string{"testing", "go.uber.org/goleak", "github.com/rankrun/rankrun/explore/exploretest", "github.com/stretchr/testify/require"} {
		assert.False(t, slices.Contains(deps, p), "cmd/rankrun depends on %s", p)
	}
}

// The README's first screen says what rankrun is, for whom, and the two
// commands; the README stays short (at most 400 lines), the guides live in
// docs/, each linked from the README, and every relative link of the
// README and the guides leads to a file.
func TestREADMEFirstScreenAndLinks(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	readme := string(b)
	lines := strings.Split(strings.TrimSuffix(readme, "\n"), "\n")
	assert.LessOrEqual(t, len(lines), 400, "README.md lines: move per-feature text to docs/")
	first := strings.Join(lines[:min(len(lines), 30)], "\n")
	assert.True(t, strings.Contains(first, "rankrun is a Go runtime for multi-rank collective programs"), "the README's first screen says what rankrun is")
	assert.True(t, strings.Contains(first, "for engineers who"), "the README's first screen says for whom")
	assert.Regexp(t, "(?m)^make run ", first)
	assert.Regexp(t, "(?m)^make test ", first)
	link := regexp.MustCompile(`\]\(([^)#\s]+)(?:#[^)]*)?\)`)
	linked := map[string]bool{}
	docs := userDocs(t)
	for _, f := range docs {
		doc, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(string(doc), -1) {
			if strings.Contains(m[1], "://") {
				continue
			}
			target := filepath.Join(filepath.Dir(f), m[1])
			_, err := os.Stat(target)
			assert.NoError(t, err, "%s links %s", f, m[1])
			linked[target] = true
		}
	}
	for _, f := range docs[1:] { // a guide is found from the README, or from a guide it links
		assert.True(t, linked[f], "no user doc links the guide %s", f)
		if filepath.Base(f) != "RFC-18450.md" {
			assert.True(t, strings.Contains(readme, "](docs/"+filepath.Base(f)+")"), "the README links the guide %s", f)
		}
	}
}
