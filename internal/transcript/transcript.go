// Package transcript runs data-driven transcript tests, in the manner of
// go.etcd.io/raft's: a text file of blocks, each an input line, a line
// "----", and the lines the input must give, up to a blank line. Lines
// starting with # between blocks are comments. A test hands each input to
// its step function and compares what it gives; on a mismatch it prints the
// whole transcript as it ran, to compare with the file.
package transcript

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Block is one input and the lines it must give.
type Block struct {
	Line  int // of the input, in its file
	Input string
	Want  []string
}

// Read reads a transcript file.
func Read(path string) ([]Block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var blocks []Block
	var cur *Block
	inWant := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && (strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#")):
		case cur == nil:
			cur = &Block{Line: n, Input: line}
		case !inWant && line == "----":
			inWant = true
		case !inWant:
			return nil, fmt.Errorf("%s:%d: want ---- after the input", path, n)
		case strings.TrimSpace(line) == "":
			blocks = append(blocks, *cur)
			cur, inWant = nil, false
		default:
			cur.Want = append(cur.Want, line)
		}
	}
	if cur != nil {
		if !inWant {
			return nil, fmt.Errorf("%s: the last input has no ----", path)
		}
		blocks = append(blocks, *cur)
	}
	return blocks, sc.Err()
}

// RewriteEnv, when set in the environment, makes Run write what the steps
// gave into a transcript that does not match, comments kept: a developer's
// tool after a deliberate change of behaviour (review the diff); a test run
// without it never writes into the source tree.
const RewriteEnv = "SHARDTEST_TRANSCRIPT_REWRITE"

// rewrite replaces the wanted lines of each block of file with gots[i],
// keeping every other line (comments, blank lines) as it was.
func rewrite(file string, blocks []Block, gots [][]string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	var out []string
	next := 0
	for i := 0; i < len(lines); i++ {
		if next < len(blocks) && i+1 == blocks[next].Line {
			out = append(out, lines[i], "----")
			out = append(out, gots[next]...)
			i += 2 // the input and ----
			for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
				i++
			}
			if i < len(lines) {
				out = append(out, lines[i])
			}
			next++
			continue
		}
		out = append(out, lines[i])
	}
	return os.WriteFile(file, []byte(strings.Join(out, "\n")+"\n"), 0o644)
}

// Run runs every transcript in dir (*.txt) as a subtest; newStep gives a
// fresh step function for each file. A step error fails the file at once.
func Run(t *testing.T, dir string, newStep func() func(input string) ([]string, error)) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts in %s: %v", dir, err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			blocks, err := Read(file)
			if err != nil {
				t.Fatal(err)
			}
			step := newStep()
			failed := false
			gots := make([][]string, len(blocks))
			for i, b := range blocks {
				got, err := step(b.Input)
				gots[i] = got
				if err != nil {
					t.Fatalf("%s:%d: %s: %v", file, b.Line, b.Input, err)
				}
				if strings.Join(got, "\n") != strings.Join(b.Want, "\n") {
					failed = true
					t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, b.Line, b.Input, strings.Join(got, "\n"), strings.Join(b.Want, "\n"))
				}
			}
			if failed && os.Getenv(RewriteEnv) != "" {
				if err := rewrite(file, blocks, gots); err != nil {
					t.Fatalf("rewriting %s: %v", file, err)
				}
				t.Logf("%s rewritten with what the steps gave (%s is set): review the diff", file, RewriteEnv)
			} else if failed {
				var ran strings.Builder
				for i, b := range blocks {
					fmt.Fprintf(&ran, "%s\n----\n", b.Input)
					for _, l := range gots[i] {
						ran.WriteString(l + "\n")
					}
					ran.WriteString("\n")
				}
				t.Logf("the transcript as it ran:\n%s", ran.String())
			}
		})
	}
}

// Args splits an input's words after the first into key=value pairs and
// plain words.
func Args(input string) (cmd string, kv map[string]string, plain []string) {
	fields := strings.Fields(input)
	kv = map[string]string{}
	if len(fields) == 0 {
		return "", kv, nil
	}
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		} else {
			plain = append(plain, f)
		}
	}
	return fields[0], kv, plain
}

// Member is a cluster member as a transcript writes it:
// name[@incarnation][#up-number][:status][!], e.g. n1, n2:leaving,
// n3@b#7:up, n4! — incarnation "a", the up-number the name's digits,
// status "up" by default; a trailing "!" marks it (unreachable, say).
type Member struct {
	Name, Incarnation, Status string
	UpNumber                  int64
	Marked                    bool
}

// UID is name@incarnation, as the reference node writes a member's UID.
func (m Member) UID() string { return m.Name + "@" + m.Incarnation }

// ParseMember reads a Member.
func ParseMember(spec string) (Member, error) {
	m := Member{Incarnation: "a", Status: "up"}
	rest, marked := strings.CutSuffix(spec, "!")
	m.Marked = marked
	rest, status, ok := strings.Cut(rest, ":")
	if ok {
		m.Status = status
	}
	rest, up, hasUp := strings.Cut(rest, "#")
	name, inc, hasInc := strings.Cut(rest, "@")
	m.Name = name
	if hasInc {
		m.Incarnation = inc
	}
	if !hasUp {
		up = strings.TrimLeft(name, "abcdefghijklmnopqrstuvwxyz")
	}
	n, err := strconv.ParseInt(up, 10, 64)
	if err != nil || name == "" {
		return m, fmt.Errorf("member %q: want name[@incarnation][#up-number][:status][!]", spec)
	}
	m.UpNumber = n
	return m, nil
}
