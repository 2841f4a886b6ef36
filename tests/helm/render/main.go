// Command render renders a Helm chart as `helm template` does, for tests on
// machines without Helm. It uses Helm's engine (Go text/template with
// missingkey=zero, the Sprig functions, and Helm's include, tpl, required,
// toYaml, fromYaml, toJson, fromJson) and Helm 3's value semantics.
//
//	render --chart DIR [--values FILE]... [--set k=v]... [--release NAME]
//	       [--namespace NS] [--notes]
//
// Each document of each non-partial template goes to stdout as
// "---\n# Source: <chart>/templates/<file>\n<document>\n", in Helm's install
// order of kinds. An error prints one line naming the file, and exits 1.
//
// Not modelled: subcharts, .Capabilities, lookup, toToml, .Files.Glob,
// .helmignore, hooks (they are printed in place), values.schema.json.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"

	// Sprig v3: in GOPATH mode (Debian's packages) the /v3 suffix is absent.
	"github.com/Masterminds/sprig"
	// sigs.k8s.io/yaml, which Helm uses, is yaml.v2 behind a JSON round trip.
	"gopkg.in/yaml.v2"
)

// chartMetadata is .Chart: Chart.yaml under Helm's capitalised field names.
type chartMetadata struct {
	APIVersion  string              `yaml:"apiVersion"`
	Name        string              `yaml:"name"`
	Version     string              `yaml:"version"`
	AppVersion  string              `yaml:"appVersion"`
	KubeVersion string              `yaml:"kubeVersion"`
	Description string              `yaml:"description"`
	Type        string              `yaml:"type"`
	Home        string              `yaml:"home"`
	Icon        string              `yaml:"icon"`
	Sources     []string            `yaml:"sources"`
	Keywords    []string            `yaml:"keywords"`
	Deprecated  bool                `yaml:"deprecated"`
	Annotations map[string]string   `yaml:"annotations"`
	Maintainers []map[string]string `yaml:"maintainers"`
}

// chartFiles is .Files: the chart's files outside templates/ and charts/,
// other than Chart.yaml and values files, read on demand through symlinks
// (Helm's chart loader follows them too).
type chartFiles struct{ dir string }

func (f chartFiles) GetBytes(name string) []byte {
	name = path.Clean(name)
	switch strings.SplitN(name, "/", 2)[0] {
	case "..", "templates", "charts", "Chart.yaml", "Chart.lock", "values.yaml", "values.schema.json":
		return nil
	}
	if path.IsAbs(name) {
		return nil
	}
	data, _ := os.ReadFile(filepath.Join(f.dir, filepath.FromSlash(name)))
	return data
}

func (f chartFiles) Get(name string) string { return string(f.GetBytes(name)) }

// readYAML decodes YAML as Helm does: yaml.v2 (YAML 1.1: a bare yes is true),
// then through JSON, so keys are strings and every number is a float64.
func readYAML(data []byte, out interface{}) error {
	var v interface{}
	err := yaml.Unmarshal(data, &v)
	if err == nil {
		data, err = json.Marshal(jsonable(v))
	}
	if err != nil {
		return fmt.Errorf("error converting YAML to JSON: %w", err)
	}
	return json.Unmarshal(data, out)
}

// jsonable turns yaml.v2's map[interface{}]interface{} into string-keyed maps.
func jsonable(v interface{}) interface{} {
	switch v := v.(type) {
	case map[interface{}]interface{}:
		m := make(map[string]interface{}, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []interface{}:
		for i := range v {
			v[i] = jsonable(v[i])
		}
	}
	return v
}

// toYAML is Helm's toYaml: JSON, then yaml.v2 (sorted keys, sequences not
// indented under their key, long strings folded at 80 columns), with the
// final newline trimmed; errors give "".
func toYAML(v interface{}) string {
	var obj interface{}
	data, err := json.Marshal(v)
	if err == nil {
		err = yaml.Unmarshal(data, &obj)
	}
	if err == nil {
		data, err = yaml.Marshal(obj)
	}
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

// Helm marks required's message so that the error line shows it alone.
var requiredMessage = regexp.MustCompile(`HELM_ERR_START(.*)HELM_ERR_END`)

// newTemplate returns an empty template set with Helm's option and functions.
func newTemplate() *template.Template {
	t := template.New("gotpl").Option("missingkey=zero")
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = toYAML
	f["toJson"] = func(v interface{}) string { data, _ := json.Marshal(v); return string(data) }
	f["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := readYAML([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	f["fromJson"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	f["required"] = func(msg string, v interface{}) (interface{}, error) {
		if s, ok := v.(string); v == nil || ok && s == "" {
			return v, fmt.Errorf("HELM_ERR_START%sHELM_ERR_END", msg)
		}
		return v, nil
	}
	bindIncludeAndTpl(f, t, map[string]int{})
	return t.Funcs(f)
}

// bindIncludeAndTpl points include and tpl of f at the template set t. tpl
// parses its text into a clone of t, so the text may use t's defines.
func bindIncludeAndTpl(f template.FuncMap, t *template.Template, depth map[string]int) {
	f["include"] = func(name string, data interface{}) (string, error) {
		if depth[name] > 1000 {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		depth[name]++
		defer func() { depth[name]-- }()
		var b strings.Builder
		err := t.ExecuteTemplate(&b, name, data)
		return b.String(), err
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		c, err := t.Clone()
		if err != nil {
			return "", err
		}
		// Clone drops the missingkey option (Go issue 43022): set it again.
		inner := template.FuncMap{}
		bindIncludeAndTpl(inner, c, depth)
		c = c.Option("missingkey=zero").Funcs(inner)
		if c, err = c.New(t.Name()).Parse(text); err != nil {
			return "", fmt.Errorf("cannot parse template %q: %w", text, err)
		}
		var b strings.Builder
		if err := c.Execute(&b, data); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %w", text, err)
		}
		return strings.ReplaceAll(b.String(), "<no value>", ""), nil
	}
}

// installOrder is Helm's order of kinds; other kinds come last, by name.
var installOrder = strings.Fields(`PriorityClass Namespace NetworkPolicy
	ResourceQuota LimitRange PodSecurityPolicy PodDisruptionBudget ServiceAccount
	Secret SecretList ConfigMap StorageClass PersistentVolume PersistentVolumeClaim
	CustomResourceDefinition ClusterRole ClusterRoleList ClusterRoleBinding
	ClusterRoleBindingList Role RoleList RoleBinding RoleBindingList Service
	DaemonSet Pod ReplicationController ReplicaSet Deployment
	HorizontalPodAutoscaler StatefulSet Job CronJob IngressClass Ingress APIService`)

func kindRank(kind string) int {
	for i, k := range installOrder {
		if k == kind {
			return i
		}
	}
	return len(installOrder)
}

// manifest is one rendered YAML document of the template source.
type manifest struct{ source, kind, content string }

// docSeparator splits a template's output into documents as Helm does.
var docSeparator = regexp.MustCompile(`(?:^|\s*\n)---\s*`)

func main() {
	var valueFiles, sets multiFlag
	chartDir := flag.String("chart", "", "chart directory")
	release := flag.String("release", "release-name", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	notes := flag.Bool("notes", false, "also print templates/NOTES.txt")
	flag.Var(&valueFiles, "values", "values file (repeatable; later ones win)")
	flag.Var(&sets, "set", "key=value over the values (repeatable)")
	flag.Parse()
	if *chartDir == "" || flag.NArg() > 0 {
		fail("usage: render --chart DIR [--values FILE]... [--set k=v]... " +
			"[--release NAME] [--namespace NS] [--notes]")
	}

	var meta chartMetadata
	data, err := os.ReadFile(filepath.Join(*chartDir, "Chart.yaml"))
	if err == nil {
		err = yaml.Unmarshal(data, &meta)
	}
	if err == nil && (meta.APIVersion == "" || meta.Name == "" || meta.Version == "") {
		err = fmt.Errorf("Chart.yaml needs apiVersion, name and version")
	}
	check("", err)

	// The user's values (--values files merged in order, then --set) go over
	// the chart's values.yaml.
	user := map[string]interface{}{}
	for _, file := range valueFiles {
		m := map[string]interface{}{}
		data, err := os.ReadFile(file)
		if err == nil {
			err = readYAML(data, &m)
		}
		check(file, err)
		user = mergeMaps(user, m)
	}
	for _, s := range sets {
		check("--set "+s, parseSet(s, user))
	}
	defaults := map[string]interface{}{}
	if data, err := os.ReadFile(filepath.Join(*chartDir, "values.yaml")); err == nil {
		check("values.yaml", readYAML(data, &defaults))
	}
	top := map[string]interface{}{
		"Values": coalesce(user, defaults),
		"Chart":  &meta,
		"Files":  chartFiles{*chartDir},
		"Release": map[string]interface{}{"Name": *release, "Namespace": *namespace,
			"Service": "Helm", "IsInstall": true, "IsUpgrade": false, "Revision": 1},
	}

	// Read templates/; like Helm's loader, fail on any broken symlink.
	sources := map[string]string{}
	templatesDir := filepath.Join(*chartDir, "templates")
	check("", filepath.WalkDir(*chartDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink != 0 {
			if _, err = filepath.EvalSymlinks(p); err != nil {
				return fmt.Errorf("error evaluating symlink %s: %w", p, err)
			}
		}
		rel, _ := filepath.Rel(templatesDir, p)
		if err != nil || d.IsDir() || strings.HasPrefix(rel, "..") {
			return err
		}
		text, err := os.ReadFile(p)
		sources[path.Join(meta.Name, "templates", filepath.ToSlash(rel))] = string(text)
		return err
	}))

	// Parse them into one set in Helm's order (deeper paths first, then by
	// name descending), which decides which of two same-named defines wins.
	names := make([]string, 0, len(sources))
	for name := range sources {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		di, dj := strings.Count(names[i], "/"), strings.Count(names[j], "/")
		return di > dj || di == dj && names[i] > names[j]
	})
	t := newTemplate()
	for _, name := range names {
		if _, err := t.New(name).Parse(sources[name]); err != nil {
			// "template: FILE:LINE: reason" -> "parse error at (FILE:LINE): reason"
			tokens := strings.Split(err.Error(), ": ")
			check("", fmt.Errorf("parse error at (%s): %s", tokens[1], tokens[len(tokens)-1]))
		}
	}

	// Execute the non-partial templates in name order; split into documents.
	sort.Strings(names)
	var docs []manifest
	notesText := ""
	for _, name := range names {
		if strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		vals := map[string]interface{}{"Template": map[string]interface{}{
			"Name": name, "BasePath": path.Join(meta.Name, "templates")}}
		for k, v := range top {
			vals[k] = v
		}
		var b strings.Builder
		if err := t.ExecuteTemplate(&b, name, vals); err != nil {
			// Helm shortens a required failure to its location and message.
			tokens := strings.SplitN(err.Error(), ": ", 3)
			if m := requiredMessage.FindStringSubmatch(err.Error()); m != nil && len(tokens) == 3 {
				err = fmt.Errorf("execution error at (%s): %s", tokens[1], m[1])
			}
			check("", err)
		}
		// missingkey=zero still prints "<no value>" for a missing map key.
		out := strings.ReplaceAll(b.String(), "<no value>", "")
		if name == path.Join(meta.Name, "templates", "NOTES.txt") {
			notesText = strings.TrimSpace(out)
			continue
		}
		for _, doc := range docSeparator.Split(strings.TrimSpace(out), -1) {
			if doc = strings.TrimSpace(doc); doc != "" {
				var head struct{ Kind string }
				check("YAML parse error on "+name, readYAML([]byte(doc), &head))
				docs = append(docs, manifest{name, head.Kind, doc})
			}
		}
	}
	sort.SliceStable(docs, func(i, j int) bool {
		ri, rj := kindRank(docs[i].kind), kindRank(docs[j].kind)
		if ri == len(installOrder) && rj == ri {
			return docs[i].kind < docs[j].kind
		}
		return ri < rj
	})

	for _, m := range docs {
		fmt.Printf("---\n# Source: %s\n%s\n", m.source, m.content)
	}
	if *notes && notesText != "" {
		fmt.Printf("---\n# Source: %s/templates/NOTES.txt\n%s\n", meta.Name, notesText)
	}
}

// mergeMaps lays b over a as `helm --values` does: nested maps merge.
func mergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]interface{}); ok {
			if am, ok := out[k].(map[string]interface{}); ok {
				out[k] = mergeMaps(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// coalesce lays the user's values over the chart's defaults: maps merge,
// other user values win, and a user null deletes the default.
func coalesce(user, defaults map[string]interface{}) map[string]interface{} {
	for k, dv := range defaults {
		uv, ok := user[k]
		um, uIsMap := uv.(map[string]interface{})
		dm, dIsMap := dv.(map[string]interface{})
		switch {
		case !ok:
			user[k] = dv
		case uv == nil:
			delete(user, k)
		case uIsMap && dIsMap:
			coalesce(um, dm)
		}
	}
	return user
}

// parseSet applies one --set argument, "a.b=1,c={x,y}", to vals as Helm's
// strvals does (without list indexes): values true, false and null are typed,
// integers become int64, the rest strings; a backslash escapes a character.
func parseSet(s string, vals map[string]interface{}) error {
	in := []rune(s)
	// until consumes input up to and including the first unescaped rune of
	// stops; it returns the text before it and that rune (0 at the end).
	until := func(stops string) (string, rune) {
		var b []rune
		for len(in) > 0 {
			r := in[0]
			in = in[1:]
			if r == '\\' && len(in) > 0 {
				r, in = in[0], in[1:]
			} else if strings.ContainsRune(stops, r) {
				return string(b), r
			}
			b = append(b, r)
		}
		return string(b), 0
	}
	for m := vals; len(in) > 0; {
		key, stop := until(".=,")
		switch {
		case stop == '.':
			child, ok := m[key].(map[string]interface{})
			if !ok {
				child = map[string]interface{}{}
				m[key] = child
			}
			m = child
			continue
		case stop != '=':
			return fmt.Errorf("key %q has no value", key)
		case len(in) == 0 || in[0] != '{':
			text, _ := until(",")
			m[key] = typedValue(text)
		default: // a list: {a,b,...}
			in = in[1:]
			list := []interface{}{}
			for stop = ','; stop == ','; {
				var text string
				text, stop = until(",}")
				list = append(list, typedValue(text))
			}
			if rest, _ := until(","); stop != '}' || rest != "" {
				return fmt.Errorf("key %q: a list must be {a,b,...}", key)
			}
			if len(list) == 1 && list[0] == "" {
				list = list[:0] // {}
			}
			m[key] = list
		}
		m = vals
	}
	return nil
}

func typedValue(s string) interface{} {
	switch strings.ToLower(s) {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	case "0":
		return int64(0)
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil && s[0] != '0' {
		return i
	}
	return s
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

// check exits 1 with err, prefixed by where, on one line, if err is not nil.
func check(where string, err error) {
	if err != nil && where != "" {
		err = fmt.Errorf("%s: %w", where, err)
	}
	if err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "render: "+strings.Join(strings.Fields(msg), " "))
	os.Exit(1)
}
