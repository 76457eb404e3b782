package docker

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct{ cmd, args string }

func parse(t *testing.T, path string) []instruction {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if cur == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if rest, ok := strings.CutSuffix(line, `\`); ok {
			cur += rest + " "
			continue
		}
		cur += line
		cmd, args, _ := strings.Cut(cur, " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur = ""
	}
	return out
}

func TestDockerfilesBuildStaticNonRootImages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both daemons; skipped in -short mode")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(goMod))[1]

	for _, daemon := range []string{"ctrld", "agentd"} {
		t.Run(daemon, func(t *testing.T) {
			steps := parse(t, "Dockerfile."+daemon)
			var stages [][]instruction
			for _, s := range steps {
				if s.cmd == "FROM" {
					stages = append(stages, nil)
				}
				if len(stages) == 0 {
					t.Fatalf("%s before the first FROM", s.cmd)
				}
				stages[len(stages)-1] = append(stages[len(stages)-1], s)
			}
			if len(stages) < 2 {
				t.Fatalf("want a multi-stage build, got %d stage(s)", len(stages))
			}
			build, final := stages[0], stages[len(stages)-1]

			if from := build[0].args; !strings.HasPrefix(from, "golang:"+goVersion) {
				t.Errorf("build stage %q: want golang:%s (go.mod's go version)", from, goVersion)
			}
			var buildCmd string
			for _, s := range build {
				if s.cmd == "RUN" && strings.Contains(s.args, "go build") {
					buildCmd = s.args
				}
			}
			if !strings.Contains(buildCmd, "CGO_ENABLED=0") || !strings.Contains(buildCmd, "./cmd/"+daemon) {
				t.Fatalf("build command %q: want CGO_ENABLED=0 and ./cmd/%s", buildCmd, daemon)
			}

			var user, entrypoint string
			copied := false
			for _, s := range final {
				switch s.cmd {
				case "USER":
					user = s.args
				case "ENTRYPOINT":
					entrypoint = s.args
				case "COPY":
					copied = copied || strings.Contains(s.args, "--from=build /out/"+daemon)
				}
			}
			if uid, _, _ := strings.Cut(user, ":"); uid == "" || uid == "0" || uid == "root" {
				t.Errorf("final stage runs as %q: want a non-root USER", user)
			}
			if !copied {
				t.Errorf("final stage does not copy /out/%s from the build stage", daemon)
			}
			if !strings.Contains(entrypoint, `"/usr/local/bin/`+daemon+`"`) {
				t.Errorf("ENTRYPOINT %s does not start %s", entrypoint, daemon)
			}

			// Run the build stage's command here, writing where /out was.
			out := t.TempDir()
			cmd := exec.Command("sh", "-c", strings.ReplaceAll(buildCmd, "/out/", out+"/"))
			cmd.Dir = root
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", buildCmd, err, msg)
			}
			bin := filepath.Join(out, daemon)
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
					t.Errorf("%s is dynamically linked (%v): it would not start on a static base image", daemon, p.Type)
				}
			}
			if help, err := exec.Command(bin, "--help").CombinedOutput(); err != nil || !strings.Contains(string(help), daemon) {
				t.Errorf("%s --help: %v\n%s", daemon, err, help)
			}
		})
	}
}
