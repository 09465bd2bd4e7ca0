package results

import (
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"

	"github.com/shardtest/shardtest/harness/report"
)

// filesPrefix is where the results root's files are served.
const filesPrefix = "/files/"

// Handler serves the index of the results store at dir and, under
// /files/, the store's files read-only (shardtest serve). Paths with a ".." segment are refused;
// the files are opened through an os.Root, so symlinks cannot escape dir.
func Handler(dir string) (http.Handler, error) {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("results directory %s does not exist (run \"shardtest run\" first, or point --results at one)", dir)
	case err != nil:
		return nil, fmt.Errorf("results directory: %w", err)
	case !st.IsDir():
		return nil, fmt.Errorf("results directory %s is not a directory", dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("results directory: %w", err)
	}
	files := http.StripPrefix(strings.TrimSuffix(filesPrefix, "/"), http.FileServerFS(notFoundFS{root.FS()}))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		serveIndex(w, dir)
	})
	mux.HandleFunc("GET "+filesPrefix, func(w http.ResponseWriter, r *http.Request) {
		switch path.Ext(r.URL.Path) {
		case ".jsonl", ".log":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(w, r)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Refuse ".." before the mux would clean it into a redirect.
		for _, p := range []string{r.URL.Path, r.URL.RawPath} {
			if hasDotDot(p) {
				http.Error(w, "bad path: \"..\" is not allowed", http.StatusBadRequest)
				return
			}
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "read-only: only GET and HEAD", http.StatusMethodNotAllowed)
			return
		}
		mux.ServeHTTP(w, r)
	}), nil
}

// notFoundFS reports files it cannot open, such as a symlink that leads out
// of the root, as not found rather than as a server error, and serves
// regular files and directories only: opening a FIFO blocks until a writer
// comes (a request hung, holding a file and a thread), and a device or
// socket is no result.
type notFoundFS struct{ fs.FS }

func (f notFoundFS) Open(name string) (fs.File, error) {
	if st, err := fs.Stat(f.FS, name); err == nil && !st.Mode().IsRegular() && !st.IsDir() {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	file, err := f.FS.Open(name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	if err != nil {
		return nil, err
	}
	return file, nil
}

func hasDotDot(p string) bool {
	for _, seg := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == ".." {
			return true
		}
	}
	return false
}

type indexRow struct {
	Run
	Date string
	Link string
	// Report links the run's index.html; empty when it has none (older
	// runs, runs that did not finish).
	Report    string
	FileLinks []fileLink
}

type fileLink struct{ Name, Href string }

func serveIndex(w http.ResponseWriter, dir string) {
	runs, err := List(dir)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	rows := make([]indexRow, len(runs))
	for i, r := range runs {
		rows[i] = indexRow{Run: r, Date: r.Started.UTC().Format("2006-01-02 15:04:05 UTC"), Link: fileHref(r.RelDir) + "/"}
		for _, f := range r.Files {
			rows[i].FileLinks = append(rows[i].FileLinks, fileLink{Name: f, Href: fileHref(r.RelDir + "/" + f)})
			if f == report.IndexFile {
				// The file server answers a folder with its index.html
				// (and redirects index.html to the folder), so the page's
				// relative links resolve inside the run folder.
				rows[i].Report = rows[i].Link
			}
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := indexTmpl.Execute(w, struct {
		Dir  string
		Runs []indexRow
	}{dir, rows}); err != nil {
		// Headers are sent; all that is left is to end the page.
		fmt.Fprintf(w, "<p>error: %s</p>", template.HTMLEscapeString(err.Error()))
	}
}

// fileHref is the escaped link to rel (slash-separated, under the root).
func fileHref(rel string) string {
	return (&url.URL{Path: filesPrefix + rel}).EscapedPath()
}

var indexTmpl = template.Must(template.New("index").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>shardtest results</title>
<style>
body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.n { text-align: right; }
.verdict { font-weight: bold; padding: .1em .4em; border-radius: .2em; }
.v-valid { background: #c8f0c8; color: #064f06; }
.v-invalid { background: #f6c4c4; color: #7a0505; }
.v-unknown { background: #f8e3a8; color: #6b4b00; }
.v-unchecked { background: #dde4f0; color: #23334f; }
.v-incomplete, .v-unreadable { background: #e4e4e4; color: #444; }
.err { color: #7a0505; font-size: .9em; }
.files a { margin-right: .6em; }
a.verdict { text-decoration: none; }
a.report { font-size: .9em; }
</style>
</head>
<body>
<h1>shardtest results</h1>
<p>{{len .Runs}} run(s) in <code>{{.Dir}}</code>, newest first.</p>
{{if .Runs}}
<table>
<tr><th>test</th><th>started</th><th>verdict</th><th>ok</th><th>fail</th><th>info</th><th>seed</th><th>runtime</th><th>nodes</th><th>workload</th><th>files</th></tr>
{{range .Runs}}
<tr>
<td><a href="{{.Link}}">{{.Name}}</a></td>
<td>{{.Date}}</td>
<td>{{if .Report}}<a class="verdict v-{{.Verdict}}" href="{{.Report}}">{{.Verdict}}</a> <a class="report" href="{{.Report}}">report</a>{{else}}<span class="verdict v-{{.Verdict}}">{{.Verdict}}</span>{{end}}{{if .Error}}<div class="err">{{.Error}}</div>{{end}}</td>
<td class="n">{{.Summary.OK}}</td>
<td class="n">{{.Summary.Fail}}</td>
<td class="n">{{.Summary.Info}}</td>
{{with .Options}}<td class="n">{{.Seed}}</td><td>{{.Runtime}}</td><td class="n">{{.Nodes}}</td><td>{{.Workload}}</td>{{else}}<td>–</td><td>–</td><td>–</td><td>–</td>{{end}}
<td class="files">{{range .FileLinks}}<a href="{{.Href}}">{{.Name}}</a> {{end}}</td>
</tr>
{{end}}
</table>
{{else}}
<p>No runs yet: <code>shardtest run</code> stores them here.</p>
{{end}}
</body>
</html>
`))
