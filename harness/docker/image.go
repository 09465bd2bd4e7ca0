package docker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// ModulePath is the module whose source StaticBinary can build.
const ModulePath = "github.com/shardtest/shardtest"

// ImageRepo is the repository of the node image; the tag is a hash of its
// content.
const ImageRepo = "shardtest-node"

// dockerfile is docker/Dockerfile (a test keeps them equal): the node's
// entrypoint is `shardtest node`, so the reference image starts exactly as
// any image under test does, from the environment of docs/protocol.md.
const dockerfile = `FROM scratch
COPY shardtest /shardtest
ENTRYPOINT ["/shardtest", "node"]
`

// ImageTag is the tag EnsureImage uses for a binary: the first 12 hex
// digits of sha256(binary + Dockerfile).
func ImageTag(binary []byte) string {
	h := sha256.New()
	h.Write(binary)
	h.Write([]byte(dockerfile))
	return ImageRepo + ":" + hex.EncodeToString(h.Sum(nil))[:12]
}

// EnsureImage returns the tag of an image FROM scratch holding the
// (static) binary at binaryPath, entrypoint /shardtest node, building it
// only if the engine does not have it yet.
func EnsureImage(ctx context.Context, cli *client.Client, binaryPath string) (tag string, err error) {
	bin, err := os.ReadFile(binaryPath)
	if err != nil {
		return "", fmt.Errorf("docker: read binary: %w", err)
	}
	tag = ImageTag(bin)
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return tag, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("docker: inspect image %s: %w", tag, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, []byte(dockerfile)},
		{"shardtest", 0o755, bin},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
			return "", err
		}
		if _, err := tw.Write(f.data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	res, err := cli.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags:        []string{tag},
		Remove:      true,
		ForceRemove: true,
		Labels:      map[string]string{"shardtest.image": "node"},
	})
	if err != nil {
		return "", fmt.Errorf("docker: build image %s: %w", tag, err)
	}
	defer res.Body.Close()
	if err := readBuildStream(res.Body); err != nil {
		return "", fmt.Errorf("docker: build image %s: %w", tag, err)
	}
	if _, err := cli.ImageInspect(ctx, tag); err != nil {
		return "", fmt.Errorf("docker: image %s missing after build: %w", tag, err)
	}
	return tag, nil
}

// readBuildStream reads the build's JSON message stream to its end and
// returns the first error it reports.
func readBuildStream(r io.Reader) error {
	dec := json.NewDecoder(r)
	var last string
	for {
		var m struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read build output: %w", err)
		}
		if m.Error != "" || m.ErrorDetail.Message != "" {
			msg := m.Error
			if msg == "" {
				msg = m.ErrorDetail.Message
			}
			if last != "" {
				msg += " (after: " + last + ")"
			}
			return errors.New(strings.TrimSpace(msg))
		}
		if s := strings.TrimSpace(m.Stream); s != "" {
			last = s
		}
	}
}

// IsStaticELF reports whether the file at path is an ELF executable with
// no program interpreter (PT_INTERP), i.e. one that runs without a libc
// in an image FROM scratch. A file that is not ELF gives an error.
func IsStaticELF(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return false, fmt.Errorf("%s: ELF type %v is not an executable", path, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

// StaticBinary returns a static Linux build of shardtest for the image
// (the reference node, and the journal and net sidecar of every run, also
// with --image): this executable if it is one, else one built with
// CGO_ENABLED=0 from this module's source — found from the working
// directory up, or where this executable was built from (a build without
// -trimpath records it) — into the user cache directory.
func StaticBinary(ctx context.Context) (path string, err error) {
	exe, err := os.Executable()
	if err == nil {
		if static, _ := IsStaticELF(exe); static && runtime.GOOS == "linux" {
			return exe, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("docker: %w", err)
	}
	root, rootErr := FindModuleRoot(wd)
	if rootErr != nil {
		if src, ok := buildSource(); ok {
			if r, err := FindModuleRoot(src); err == nil {
				root, rootErr = r, nil
			}
		}
	}
	_, goErr := exec.LookPath("go")
	if rootErr != nil || goErr != nil {
		why := rootErr
		if why == nil {
			why = goErr
		}
		return "", fmt.Errorf("docker: %s is not a static binary and it cannot be rebuilt here (%v); build it with CGO_ENABLED=0 go build ./cmd/shardtest and pass --binary", exe, why)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	out := filepath.Join(cache, "shardtest", "shardtest-static")
	if err := BuildStatic(ctx, root, out); err != nil {
		return "", fmt.Errorf("docker: %w; build shardtest with CGO_ENABLED=0 and pass --binary", err)
	}
	return out, nil
}

// BuildStatic builds ./cmd/shardtest of the module at root into out with
// CGO_ENABLED=0 for Linux.
func BuildStatic(ctx context.Context, root, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/shardtest") // -trimpath: the same source gives the same binary, so the image is reused
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("CGO_ENABLED=0 go build ./cmd/shardtest in %s: %v: %s", root, err, strings.TrimSpace(string(b)))
	}
	static, err := IsStaticELF(out)
	if err != nil {
		return err
	}
	if !static {
		return fmt.Errorf("%s is not static after a CGO_ENABLED=0 build", out)
	}
	return nil
}

// FindModuleRoot walks up from dir to the directory whose go.mod declares
// ModulePath.
func FindModuleRoot(dir string) (string, error) {
	for d := dir; ; {
		if modulePathOf(filepath.Join(d, "go.mod")) == ModulePath {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod of module %s in %s or above", ModulePath, dir)
		}
		d = parent
	}
}

func modulePathOf(gomod string) string {
	f, err := os.Open(gomod)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// buildSource is the directory this package was compiled from, when the
// build recorded it (not with -trimpath) and it still exists.
func buildSource() (string, bool) {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return "", false
	}
	dir := filepath.Dir(file)
	if _, err := os.Stat(dir); err != nil {
		return "", false
	}
	return dir, true
}
