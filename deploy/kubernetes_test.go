package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/inboxd/inboxd/internal/opfiles/routesfile"
)

const (
	// k8sDir holds the manifests; every *.yaml file in it is decoded.
	k8sDir = "kubernetes"
	// k8sDockerfile builds the image the manifests run.
	k8sDockerfile = "Dockerfile"
	// k8sImageLabel is the Dockerfile LABEL that carries the image reference.
	k8sImageLabel = "io.github.inboxd.image"
	// k8sHTTPPort is INBOXD_HTTP_ADDR's default port (config.Config.HTTPAddr).
	k8sHTTPPort = 8080
	// k8sShutdownSlack is how long the daemon may take after
	// INBOXD_SHUTDOWN_TIMEOUT to exit (ingest's last batch and offset commit).
	k8sShutdownSlack = 5 * time.Second
	// k8sJob is the Prometheus job name the alert rules select.
	k8sJob = "inboxd"
)

// k8sDoc is one decoded document of a manifest file.
type k8sDoc struct {
	file  string // base name
	index int    // position in the file, from 1
	gvk   schema.GroupVersionKind
	obj   runtime.Object
}

func (d k8sDoc) String() string {
	name := ""
	if m, err := metaOf(d.obj); err == nil {
		name = "/" + m.GetName()
	}
	return fmt.Sprintf("%s document %d (%s%s)", d.file, d.index, d.gvk.Kind, name)
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}

// k8sScheme knows exactly the kinds the manifests may hold; any other kind
// fails to decode.
func k8sScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(appsv1.SchemeGroupVersion, &appsv1.Deployment{})
	s.AddKnownTypes(corev1.SchemeGroupVersion,
		&corev1.Service{}, &corev1.ConfigMap{}, &corev1.Secret{}, &corev1.ServiceAccount{})
	s.AddKnownTypes(policyv1.SchemeGroupVersion, &policyv1.PodDisruptionBudget{})
	s.AddKnownTypes(networkingv1.SchemeGroupVersion, &networkingv1.NetworkPolicy{})
	s.AddKnownTypes(monitoringv1.SchemeGroupVersion,
		&monitoringv1.ServiceMonitor{}, &monitoringv1.PrometheusRule{})
	return s
}

// k8sDecode decodes every document of a multi-document YAML file strictly:
// unknown, duplicate and wrongly-cased fields, wrong types, unknown kinds and
// documents without a name are errors. Empty documents (only comments) are
// skipped.
func k8sDecode(file string, data []byte) ([]k8sDoc, error) {
	scheme := k8sScheme()
	ser := k8sjson.NewSerializerWithOptions(k8sjson.DefaultMetaFactory, scheme, scheme,
		k8sjson.SerializerOptions{Yaml: true, Strict: true})
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs []k8sDoc
	var errs []error
	for i := 1; ; i++ {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: document %d: %w", file, i, err))
			continue
		}
		if s := strings.TrimSpace(string(js)); s == "null" || s == "" {
			continue
		}
		obj, gvk, err := ser.Decode(raw, nil, nil)
		if err != nil {
			kind := ""
			if gvk != nil {
				kind = " (" + gvk.String() + ")"
			}
			errs = append(errs, fmt.Errorf("%s: document %d%s: %w", file, i, kind, err))
			continue
		}
		d := k8sDoc{file: file, index: i, gvk: *gvk, obj: obj}
		if m, err := metaOf(obj); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d, err))
			continue
		} else if m.GetName() == "" {
			errs = append(errs, fmt.Errorf("%s: metadata.name is empty", d))
			continue
		}
		docs = append(docs, d)
	}
	return docs, errors.Join(errs...)
}

// k8sLoad decodes every *.yaml file in deploy/kubernetes (including files
// other people add, such as prometheusrule.yaml) and fails the test on any
// decoding error.
func k8sLoad(t *testing.T) []k8sDoc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	yml, _ := filepath.Glob(filepath.Join(k8sDir, "*.yml"))
	files = append(files, yml...)
	if len(files) == 0 {
		t.Fatalf("no manifests in %s", k8sDir)
	}
	var all []k8sDoc
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := k8sDecode(filepath.Base(f), data)
		if err != nil {
			t.Errorf("%s does not decode strictly:\n%v", f, err)
		}
		if len(docs) == 0 && err == nil {
			t.Errorf("%s holds no Kubernetes object", f)
		}
		all = append(all, docs...)
	}
	if t.Failed() {
		t.FailNow()
	}
	return all
}

// k8sHas reports whether docs hold an object of type T named name.
func k8sHas[T runtime.Object](docs []k8sDoc, name string) bool {
	for _, d := range docs {
		if _, ok := d.obj.(T); ok {
			if m, _ := metaOf(d.obj); m.GetName() == name {
				return true
			}
		}
	}
	return false
}

// k8sOne returns the only object of type T named name.
func k8sOne[T runtime.Object](t *testing.T, docs []k8sDoc, name string) T {
	t.Helper()
	var found []T
	for _, d := range docs {
		if o, ok := d.obj.(T); ok {
			if m, _ := metaOf(d.obj); m.GetName() == name {
				found = append(found, o)
			}
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %T named %q in %s, found %d", zero, name, k8sDir, len(found))
	}
	return found[0]
}

func TestK8sManifestsDecodeStrictly(t *testing.T) {
	docs := k8sLoad(t)
	seen := map[string]string{}
	for _, d := range docs {
		m, _ := metaOf(d.obj)
		key := d.gvk.Kind + "/" + m.GetName()
		if prev, ok := seen[key]; ok {
			t.Errorf("%s: %s is also defined in %s", d, key, prev)
		}
		seen[key] = d.String()
		if m.GetNamespace() != "" {
			t.Errorf("%s: sets namespace %q; the manifests apply to the namespace kubectl targets", d, m.GetNamespace())
		}
	}
	for _, want := range []string{
		"ServiceAccount/inboxd", "ConfigMap/inboxd-routes", "Deployment/inboxd",
		"Service/inboxd", "PodDisruptionBudget/inboxd", "ServiceMonitor/inboxd", "NetworkPolicy/inboxd",
	} {
		if _, ok := seen[want]; !ok {
			t.Errorf("no %s in %s", want, k8sDir)
		}
	}
}

// TestK8sDecodeRejects shows that k8sDecode fails on what kubectl apply
// --validate=strict (or the API server) would refuse, and accepts every kind
// the manifests may use.
func TestK8sDecodeRejects(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		wantErr   string // "" means: must decode
	}{
		{"service", "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: [{port: 1}]}\n", ""},
		{"secret", "apiVersion: v1\nkind: Secret\nmetadata: {name: a}\nstringData: {url: x}\n", ""},
		{"configmap", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n", ""},
		{"serviceaccount", "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a}\n", ""},
		{"pdb", "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: a}\nspec: {minAvailable: 1}\n", ""},
		{"prometheusrule", "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: a}\nspec: {groups: [{name: g, rules: [{alert: A, expr: up == 0}]}]}\n", ""},
		{"comment-only documents are skipped", "# nothing\n---\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a}\n", ""},
		{"unknown field", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec: {replicass: 2}\n", `unknown field "spec.replicass"`},
		{"unknown nested field", "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: a}\nspec: {selector: {}, endpoints: [{port: http, pathh: /metrics}]}\n", `unknown field "spec.endpoints[0].pathh"`},
		{"wrongly cased field", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec: {Replicas: 2}\n", `unknown field "spec.Replicas"`},
		{"duplicate field", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\ndata: {k: w}\n", "already set in map"},
		{"wrong type", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec: {replicas: two}\n", "cannot unmarshal"},
		{"unknown kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n", `no kind "Pod" is registered`},
		{"unknown group", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: a}\n", `no kind "Widget" is registered`},
		{"old API version", "apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: a}\n", "is registered for version"},
		{"no kind", "apiVersion: v1\nmetadata: {name: a}\n", "Object 'Kind' is missing"},
		{"no name", "apiVersion: v1\nkind: ConfigMap\ndata: {k: v}\n", "metadata.name is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := k8sDecode("case.yaml", []byte(tc.doc))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("want no error, got %v", err)
			case tc.wantErr == "" && len(docs) != 1:
				t.Fatalf("want 1 document, got %d", len(docs))
			case tc.wantErr != "" && err == nil:
				t.Fatalf("decoded without error; want an error containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("want an error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

// k8sPodSecurity returns the Pod Security "restricted" violations of a pod,
// latest policy version, one line per failed check, with its detail.
func k8sPodSecurity(t *testing.T, meta metav1.ObjectMeta, spec corev1.PodSpec) []string {
	t.Helper()
	ev, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	var out []string
	for _, r := range ev.EvaluatePod(lv, &meta, &spec) {
		if !r.Allowed {
			out = append(out, r.ForbiddenReason+" ("+r.ForbiddenDetail+")")
		}
	}
	return out
}

// k8sPodTemplates returns the pod template of every workload in docs.
func k8sPodTemplates(docs []k8sDoc) map[string]corev1.PodTemplateSpec {
	out := map[string]corev1.PodTemplateSpec{}
	for _, d := range docs {
		if dep, ok := d.obj.(*appsv1.Deployment); ok {
			out[d.String()] = dep.Spec.Template
		}
	}
	return out
}

// The pods of the plain manifests and of the chart, rendered with its
// defaults and with every source on, pass Pod Security "restricted".
func TestK8sPodSecurityRestricted(t *testing.T) {
	for _, set := range k8sSets(t) {
		t.Run(set.name, func(t *testing.T) {
			templates := k8sPodTemplates(set.docs)
			if len(templates) == 0 {
				t.Fatal("no pod template in the manifests")
			}
			for name, tpl := range templates {
				for _, v := range k8sPodSecurity(t, tpl.ObjectMeta, tpl.Spec) {
					t.Errorf("%s: Pod Security restricted: %s", name, v)
				}
			}
		})
	}
}

// k8sSet is one set of manifests the checks apply to.
type k8sSet struct {
	name string
	docs []k8sDoc
}

// k8sSets are the plain manifests of deploy/kubernetes and the chart's
// renderings (chart_test.go): every check of this file runs on each.
func k8sSets(t *testing.T) []k8sSet {
	t.Helper()
	sets := []k8sSet{{"plain manifests", k8sLoad(t)}}
	for _, r := range chartRenderings {
		sets = append(sets, k8sSet{"chart " + r.name, chartRender(t, r.values...)})
	}
	return sets
}

// TestK8sPodSecurityCatchesViolations weakens the shipped pod spec in the
// ways the old manifest was weak and checks that each is named.
func TestK8sPodSecurityCatchesViolations(t *testing.T) {
	dep := k8sOne[*appsv1.Deployment](t, k8sLoad(t), "inboxd")
	for _, tc := range []struct {
		name   string
		weaken func(*corev1.PodSpec)
		want   []string // reasons, as pod-security-admission words them
	}{
		{"as shipped", func(*corev1.PodSpec) {}, nil},
		{"privilege escalation allowed", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
		}, []string{"allowPrivilegeEscalation != false"}},
		{"capabilities kept", func(s *corev1.PodSpec) {
			s.InitContainers[0].SecurityContext.Capabilities = nil
		}, []string{"unrestricted capabilities"}},
		{"capability added", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}, []string{"unrestricted capabilities"}},
		{"no seccomp profile", func(s *corev1.PodSpec) {
			s.SecurityContext.SeccompProfile = nil
		}, []string{"seccompProfile"}},
		{"may run as root", func(s *corev1.PodSpec) {
			s.SecurityContext.RunAsNonRoot = nil
		}, []string{"runAsNonRoot != true"}},
		{"runs as root", func(s *corev1.PodSpec) {
			s.SecurityContext.RunAsUser = new(int64)
		}, []string{"runAsUser=0"}},
		{"host network", func(s *corev1.PodSpec) { s.HostNetwork = true }, []string{"host namespaces"}},
		{"the old manifest's pod", func(s *corev1.PodSpec) {
			s.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: new(bool), RunAsUser: new(int64)}
			*s.SecurityContext.RunAsNonRoot = true
			*s.SecurityContext.RunAsUser = 65532
			for i := range s.InitContainers {
				s.InitContainers[i].SecurityContext = nil
			}
			for i := range s.Containers {
				s.Containers[i].SecurityContext = nil
			}
		}, []string{"allowPrivilegeEscalation != false", "unrestricted capabilities", "seccompProfile"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := dep.Spec.Template.Spec.DeepCopy()
			tc.weaken(spec)
			got := k8sPodSecurity(t, dep.Spec.Template.ObjectMeta, *spec)
			if tc.want == nil && len(got) > 0 {
				t.Fatalf("want no violation, got %q", got)
			}
			for _, w := range tc.want {
				if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
					t.Errorf("want a violation %q, got %q", w, got)
				}
			}
		})
	}
}

// k8sDockerfileInfo is what the manifests must agree with in deploy/Dockerfile.
type k8sDockerfileInfo struct {
	image  string  // the image reference label
	expose []int32 // EXPOSE ports
	uid    int64   // numeric USER
}

// k8sParseDockerfile reads the final stage's LABEL (k8sImageLabel), EXPOSE
// and USER instructions.
func k8sParseDockerfile(data []byte) (k8sDockerfileInfo, error) {
	var info k8sDockerfileInfo
	info.uid = -1
	// Join continuation lines, drop comments.
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(string(data), "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "#") || (t == "" && cur.Len() == 0) {
			continue
		}
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " \t"), "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		lines = append(lines, strings.TrimSpace(cur.String()))
		cur.Reset()
	}
	labelRe := regexp.MustCompile(`([A-Za-z0-9._-]+)=(?:"([^"]*)"|(\S+))`)
	for _, l := range lines {
		instr, args, _ := strings.Cut(l, " ")
		args = strings.TrimSpace(args)
		switch strings.ToUpper(instr) {
		case "FROM": // a new stage: only the last one counts
			info = k8sDockerfileInfo{uid: -1}
		case "LABEL":
			for _, m := range labelRe.FindAllStringSubmatch(args, -1) {
				if m[1] == k8sImageLabel {
					info.image = m[2] + m[3]
				}
			}
		case "EXPOSE":
			for _, p := range strings.Fields(args) {
				p, _, _ = strings.Cut(p, "/")
				n, err := strconv.ParseInt(p, 10, 32)
				if err != nil {
					return info, fmt.Errorf("EXPOSE %s: %w", p, err)
				}
				info.expose = append(info.expose, int32(n))
			}
		case "USER":
			u, _, _ := strings.Cut(args, ":")
			n, err := strconv.ParseInt(u, 10, 64)
			if err != nil {
				return info, fmt.Errorf("USER %s is not numeric: Kubernetes cannot check runAsNonRoot against a name", args)
			}
			info.uid = n
		}
	}
	if info.image == "" {
		return info, fmt.Errorf("no LABEL %s=… in the final stage", k8sImageLabel)
	}
	if info.uid < 0 {
		return info, errors.New("no USER in the final stage")
	}
	return info, nil
}

func k8sReadDockerfile(t *testing.T) k8sDockerfileInfo {
	t.Helper()
	data, err := os.ReadFile(k8sDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	info, err := k8sParseDockerfile(data)
	if err != nil {
		t.Fatalf("%s: %v", k8sDockerfile, err)
	}
	// The label names the build argument VERSION: the image is the
	// repository's VERSION.
	if want := "ghcr.io/inboxd/inboxd:${VERSION}"; info.image != want {
		t.Fatalf("%s: LABEL %s=%q, want %q", k8sDockerfile, k8sImageLabel, info.image, want)
	}
	info.image = strings.ReplaceAll(info.image, "${VERSION}", readVersion(t))
	return info
}

func TestK8sParseDockerfile(t *testing.T) {
	info, err := k8sParseDockerfile([]byte("FROM a AS b\nUSER 1\nLABEL " + k8sImageLabel + "=x\nFROM c\n# LABEL " + k8sImageLabel + "=no\nLABEL a=b \\\n  " + k8sImageLabel + "=\"r/i:1\"\nUSER 7:7\nEXPOSE 80/tcp 8080\n"))
	if err != nil {
		t.Fatal(err)
	}
	if info.image != "r/i:1" || info.uid != 7 || !slices.Equal(info.expose, []int32{80, 8080}) {
		t.Fatalf("got %+v", info)
	}
	for _, bad := range []string{"FROM a\nUSER 1\n", "FROM a\nLABEL " + k8sImageLabel + "=x\nUSER nonroot\n", "FROM a\nLABEL " + k8sImageLabel + "=x\n"} {
		if _, err := k8sParseDockerfile([]byte(bad)); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

// k8sEnv returns the value of a container's literal env variable.
func k8sEnv(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom == nil {
			return e.Value, true
		}
	}
	return "", false
}

// k8sFileSource says where a file path inside a container comes from.
type k8sFileSource struct {
	kind, name, key string // "secret" or "configMap", object name, data key
}

// k8sResolveFile finds the volume mount that holds path in c and the Secret
// or ConfigMap key behind it.
func k8sResolveFile(spec corev1.PodSpec, c corev1.Container, file string) (k8sFileSource, error) {
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok || m.SubPath != "" {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			var src k8sFileSource
			var items []corev1.KeyToPath
			switch {
			case v.Secret != nil:
				src, items = k8sFileSource{kind: "secret", name: v.Secret.SecretName}, v.Secret.Items
			case v.ConfigMap != nil:
				src, items = k8sFileSource{kind: "configMap", name: v.ConfigMap.Name}, v.ConfigMap.Items
			default:
				return k8sFileSource{}, fmt.Errorf("%s: volume %q is neither a Secret nor a ConfigMap", file, v.Name)
			}
			if len(items) == 0 {
				src.key = rel
				return src, nil
			}
			for _, it := range items {
				if path.Clean(it.Path) == rel {
					src.key = it.Key
					return src, nil
				}
			}
			return k8sFileSource{}, fmt.Errorf("%s: volume %q has no item with path %q", file, v.Name, rel)
		}
		return k8sFileSource{}, fmt.Errorf("%s: no volume %q", file, m.Name)
	}
	return k8sFileSource{}, fmt.Errorf("%s: no volume is mounted there in container %q", file, c.Name)
}

// k8sSecretKeys lists the Secret keys container c can read.
func k8sSecretKeys(spec corev1.PodSpec, c corev1.Container, secret string) []string {
	var keys []string
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.Secret == nil || v.Secret.SecretName != secret {
				continue
			}
			if len(v.Secret.Items) == 0 {
				keys = append(keys, "*")
			}
			for _, it := range v.Secret.Items {
				keys = append(keys, it.Key)
			}
		}
	}
	for _, e := range c.EnvFrom {
		if e.SecretRef != nil && e.SecretRef.Name == secret {
			keys = append(keys, "*")
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == secret {
			keys = append(keys, e.ValueFrom.SecretKeyRef.Key)
		}
	}
	return keys
}

// k8sGoMemLimit parses GOMEMLIMIT's syntax (a byte count with an optional
// B, KiB, MiB, GiB or TiB suffix).
func k8sGoMemLimit(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("GOMEMLIMIT %q: %w", s, err)
	}
	return n * mult, nil
}

// k8sPortNumber resolves a probe's or Service's port against the container.
func k8sPortNumber(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	if p.Type == intstr.Int {
		return p.IntVal, true
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// The plain manifests and the chart's renderings agree with the image and
// the daemon: the image reference (VERSION), the port, the user, the
// hardening, the variables, the shutdown timing, the probes, the
// resources, the secrets and routes, the Service, ServiceMonitor and
// PodDisruptionBudget.
func TestK8sConsistency(t *testing.T) {
	for _, set := range k8sSets(t) {
		t.Run(set.name, func(t *testing.T) { k8sCheckConsistency(t, set.docs) })
	}
}

func k8sCheckConsistency(t *testing.T, docs []k8sDoc) {
	df := k8sReadDockerfile(t)
	dep := k8sOne[*appsv1.Deployment](t, docs, "inboxd")
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container in Deployment/inboxd, got %d", len(pod.Containers))
	}
	daemon := pod.Containers[0]
	all := append(slices.Clone(pod.InitContainers), pod.Containers...)

	t.Run("image", func(t *testing.T) {
		if !strings.HasPrefix(df.image, "ghcr.io/inboxd/inboxd:") || strings.HasSuffix(df.image, ":latest") {
			t.Errorf("%s: image %q: want ghcr.io/inboxd/inboxd:<version>", k8sDockerfile, df.image)
		}
		for _, c := range all {
			if c.Image != df.image {
				t.Errorf("container %q runs %q; %s labels its image %q", c.Name, c.Image, k8sDockerfile, df.image)
			}
		}
	})

	t.Run("port", func(t *testing.T) {
		var http *corev1.ContainerPort
		for i := range daemon.Ports {
			if daemon.Ports[i].Name == "http" {
				http = &daemon.Ports[i]
			}
		}
		if http == nil {
			t.Fatalf("container %q has no port named http", daemon.Name)
		}
		if http.ContainerPort != k8sHTTPPort {
			t.Errorf("port http is %d, want %d (INBOXD_HTTP_ADDR's default)", http.ContainerPort, k8sHTTPPort)
		}
		if !slices.Contains(df.expose, http.ContainerPort) {
			t.Errorf("port http is %d; %s EXPOSEs %v", http.ContainerPort, k8sDockerfile, df.expose)
		}
		if addr, ok := k8sEnv(daemon, "INBOXD_HTTP_ADDR"); ok && !strings.HasSuffix(addr, ":"+strconv.Itoa(int(http.ContainerPort))) {
			t.Errorf("INBOXD_HTTP_ADDR=%q does not listen on port http (%d)", addr, http.ContainerPort)
		}
		if pod.SecurityContext == nil || pod.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser != df.uid {
			t.Errorf("pod runAsUser must be the Dockerfile's USER %d", df.uid)
		}
	})

	t.Run("hardening", func(t *testing.T) {
		// Pod Security "restricted" does not require these; the daemon
		// writes no files and never talks to the API server.
		for _, c := range all {
			if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("container %q: want readOnlyRootFilesystem: true", c.Name)
			}
		}
		if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Error("automountServiceAccountToken must be false: inboxd does not use the Kubernetes API")
		}
	})

	t.Run("known variables", func(t *testing.T) {
		known := sdKnownVars()
		for _, c := range all {
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "INBOXD_") && !known[e.Name] {
					t.Errorf("container %q: %s is not a variable inboxd reads", c.Name, e.Name)
				}
			}
		}
	})

	t.Run("shutdown", func(t *testing.T) {
		v, ok := k8sEnv(daemon, "INBOXD_SHUTDOWN_TIMEOUT")
		if !ok {
			t.Fatal("INBOXD_SHUTDOWN_TIMEOUT is not set explicitly in the container")
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("INBOXD_SHUTDOWN_TIMEOUT=%q: %v", v, err)
		}
		if pod.TerminationGracePeriodSeconds == nil {
			t.Fatal("terminationGracePeriodSeconds is not set (default 30s)")
		}
		grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
		if grace <= d+k8sShutdownSlack {
			t.Errorf("terminationGracePeriodSeconds %v must exceed INBOXD_SHUTDOWN_TIMEOUT %v + %v", grace, d, k8sShutdownSlack)
		}
	})

	t.Run("probes", func(t *testing.T) {
		check := func(kind string, p *corev1.Probe, wantPath string) {
			if p == nil || p.HTTPGet == nil {
				t.Errorf("%s: want an httpGet probe on %s", kind, wantPath)
				return
			}
			if p.HTTPGet.Path != wantPath {
				t.Errorf("%s probes %s, want %s", kind, p.HTTPGet.Path, wantPath)
			}
			if n, ok := k8sPortNumber(daemon, p.HTTPGet.Port); !ok || n != k8sHTTPPort {
				t.Errorf("%s probes port %s, want the http port %d", kind, p.HTTPGet.Port.String(), k8sHTTPPort)
			}
		}
		check("livenessProbe", daemon.LivenessProbe, "/healthz")
		check("readinessProbe", daemon.ReadinessProbe, "/readyz")
		// A startup probe gates liveness: on /readyz it would restart pods
		// while the database is down, which restarting does not fix.
		if daemon.StartupProbe != nil {
			check("startupProbe", daemon.StartupProbe, "/healthz")
		}
	})

	t.Run("resources", func(t *testing.T) {
		for _, c := range all {
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, okReq := c.Resources.Requests[r]
				lim, okLim := c.Resources.Limits[r]
				if !okReq || !okLim {
					t.Errorf("container %q: want %s request and limit", c.Name, r)
				} else if req.Cmp(lim) > 0 {
					t.Errorf("container %q: %s request %s above limit %s", c.Name, r, req.String(), lim.String())
				}
			}
		}
		lim := daemon.Resources.Limits[corev1.ResourceMemory]
		if want := resource.MustParse("512Mi"); lim.Cmp(want) != 0 {
			t.Errorf("memory limit %s, want 512Mi", lim.String())
		}
		v, ok := k8sEnv(daemon, "GOMEMLIMIT")
		if !ok {
			t.Fatal("GOMEMLIMIT is not set")
		}
		n, err := k8sGoMemLimit(v)
		if err != nil {
			t.Fatal(err)
		}
		if ratio := float64(n) / float64(lim.Value()); ratio < 0.75 || ratio > 0.85 {
			t.Errorf("GOMEMLIMIT=%s is %.0f%% of the memory limit %s, want about 80%%", v, 100*ratio, lim.String())
		}
	})

	t.Run("secrets and routes", func(t *testing.T) {
		for _, c := range all {
			for _, name := range []string{"INBOXD_DATABASE_URL", "INBOXD_MIGRATE_DATABASE_URL"} {
				for _, e := range c.Env {
					if e.Name == name {
						t.Errorf("container %q sets %s; use %s_FILE with a Secret volume", c.Name, name, name)
					}
				}
			}
		}
		file := func(c corev1.Container, env string) k8sFileSource {
			p, ok := k8sEnv(c, env)
			if !ok {
				t.Fatalf("container %q: %s is not set", c.Name, env)
			}
			src, err := k8sResolveFile(pod, c, p)
			if err != nil {
				t.Fatalf("container %q: %s: %v", c.Name, env, err)
			}
			return src
		}
		if len(pod.InitContainers) != 1 || pod.InitContainers[0].Name != "migrate" {
			t.Fatal("want one init container, migrate")
		}
		mig := pod.InitContainers[0]
		if !slices.Equal(mig.Args, []string{"migrate"}) || len(mig.Command) != 0 {
			t.Errorf("init container runs %q %q, want args [migrate]", mig.Command, mig.Args)
		}
		if !slices.Equal(daemon.Args, []string{"run"}) || len(daemon.Command) != 0 {
			t.Errorf("container %q runs %q %q, want args [run]", daemon.Name, daemon.Command, daemon.Args)
		}
		runtimeURL := file(daemon, "INBOXD_DATABASE_URL_FILE")
		migrateURL := file(mig, "INBOXD_MIGRATE_DATABASE_URL_FILE")
		for _, s := range []k8sFileSource{runtimeURL, migrateURL} {
			if s.kind != "secret" {
				t.Errorf("database URL %s comes from a %s, want a Secret", s.key, s.kind)
			}
		}
		if runtimeURL == migrateURL {
			t.Errorf("the runtime and migrator URLs are the same Secret key %q", runtimeURL.key)
		}
		if keys := k8sSecretKeys(pod, daemon, migrateURL.name); slices.Contains(keys, migrateURL.key) || slices.Contains(keys, "*") {
			t.Errorf("container %q can read the migrator URL (Secret %s key %s)", daemon.Name, migrateURL.name, migrateURL.key)
		}
		routes := file(daemon, "INBOXD_ROUTES")
		if routes.kind != "configMap" {
			t.Fatalf("routes file comes from a %s, want a ConfigMap", routes.kind)
		}
		cm := k8sOne[*corev1.ConfigMap](t, docs, routes.name)
		data, ok := cm.Data[routes.key]
		if !ok {
			t.Fatalf("ConfigMap %s has no key %q", cm.Name, routes.key)
		}
		if _, err := routesfile.Parse([]byte(data)); err != nil {
			t.Errorf("ConfigMap %s %s: %v", cm.Name, routes.key, err)
		}
		if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
			t.Error("enableServiceLinks must be false: Service inboxd would add INBOXD_PORT, INBOXD_SERVICE_HOST, … to the daemon's environment")
		}
	})

	t.Run("service, servicemonitor, pdb", func(t *testing.T) {
		podLabels := labels.Set(dep.Spec.Template.Labels)
		sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
		if err != nil || !sel.Matches(podLabels) {
			t.Errorf("Deployment selector %v does not match its pod labels %v (%v)", dep.Spec.Selector, podLabels, err)
		}
		svc := k8sOne[*corev1.Service](t, docs, "inboxd")
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) || len(svc.Spec.Selector) == 0 {
			t.Errorf("Service selector %v does not select the pods %v", svc.Spec.Selector, podLabels)
		}
		if !svc.Spec.PublishNotReadyAddresses {
			t.Error("Service inboxd: publishNotReadyAddresses must be true, or Prometheus stops scraping a pod while /readyz fails, just when its metrics matter")
		}
		var svcPort *corev1.ServicePort
		for i := range svc.Spec.Ports {
			if svc.Spec.Ports[i].Name == "http" {
				svcPort = &svc.Spec.Ports[i]
			}
		}
		if svcPort == nil {
			t.Fatal("Service has no port named http")
		}
		if n, ok := k8sPortNumber(daemon, svcPort.TargetPort); !ok || n != k8sHTTPPort {
			t.Errorf("Service port http targets %s, want the container's http port %d", svcPort.TargetPort.String(), k8sHTTPPort)
		}

		// The chart installs the ServiceMonitor only when asked (it needs
		// the Prometheus Operator's CRDs); the plain manifests have one
		// (TestK8sManifestsDecodeStrictly).
		if k8sHas[*monitoringv1.ServiceMonitor](docs, "inboxd") {
			sm := k8sOne[*monitoringv1.ServiceMonitor](t, docs, "inboxd")
			smSel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
			if err != nil || smSel.Empty() || !smSel.Matches(labels.Set(svc.Labels)) {
				t.Errorf("ServiceMonitor selector %v does not select Service inboxd %v (%v)", sm.Spec.Selector, svc.Labels, err)
			}
			job := svc.Name
			if sm.Spec.JobLabel != "" {
				job = svc.Labels[sm.Spec.JobLabel]
			}
			if job != k8sJob {
				t.Errorf("ServiceMonitor scrapes as job %q, want %q (the alert rules select it)", job, k8sJob)
			}
			if len(sm.Spec.Endpoints) != 1 {
				t.Fatalf("ServiceMonitor: want one endpoint, got %d", len(sm.Spec.Endpoints))
			}
			if ep := sm.Spec.Endpoints[0]; ep.Port != svcPort.Name || ep.Path != "/metrics" {
				t.Errorf("ServiceMonitor endpoint port %q path %q, want port %q path /metrics", ep.Port, ep.Path, svcPort.Name)
			}
		}

		k8sCheckNetworkPolicy(t, docs, daemon, podLabels)

		pdb := k8sOne[*policyv1.PodDisruptionBudget](t, docs, "inboxd")
		pdbSel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || pdbSel.Empty() || !pdbSel.Matches(podLabels) {
			t.Errorf("PodDisruptionBudget selector %v does not select the pods %v (%v)", pdb.Spec.Selector, podLabels, err)
		}
		if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.Type != intstr.Int {
			t.Fatal("PodDisruptionBudget: want an integer minAvailable")
		}
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas <= pdb.Spec.MinAvailable.IntVal {
			t.Errorf("replicas must exceed the PodDisruptionBudget's minAvailable %d, or no node can be drained", pdb.Spec.MinAvailable.IntVal)
		}
		if sa := pod.ServiceAccountName; sa != "" {
			k8sOne[*corev1.ServiceAccount](t, docs, sa)
		}
	})
}

// k8sImageRe finds image references to inboxd's repository in text.
var k8sImageRe = regexp.MustCompile(`ghcr\.io/inboxd/inboxd(:[^\s"'` + "`" + `,;\]}]*)?`)

// TestK8sImageReferenceEverywhere checks that every tagged mention of
// ghcr.io/inboxd/inboxd in the repository's docs (README.md and docs/),
// Makefile and deployment files is ghcr.io/inboxd/inboxd:<VERSION>.
func TestK8sImageReferenceEverywhere(t *testing.T) {
	want := k8sReadDockerfile(t).image
	files := []string{"../README.md", "../Makefile"}
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, pages...)
	err = filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !strings.HasSuffix(p, "_test.go") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range k8sImageRe.FindAllStringSubmatch(line, -1) {
				found++
				if m[1] == "" || m[1] == ":" || strings.HasPrefix(m[1], ":$") || strings.HasPrefix(m[1], ":<") {
					continue // the repository alone, no tag, or a tag from a variable or placeholder (VERSION)
				}
				if ref := strings.TrimRight(m[0], ".:)"); ref != want {
					t.Errorf("%s:%d: image %s, want %s (VERSION)", f, i+1, ref, want)
				}
			}
		}
	}
	if found == 0 {
		t.Fatal("no image reference found at all")
	}
}

// k8sCheckNetworkPolicy checks that NetworkPolicy inboxd selects the pods
// and admits traffic to each port of the daemon only by a rule of that
// port: every rule names its ports, every port a rule names is one the
// container serves, and every port the container serves has a rule.
func k8sCheckNetworkPolicy(t *testing.T, docs []k8sDoc, daemon corev1.Container, podLabels labels.Set) {
	t.Helper()
	for _, p := range k8sNetworkPolicyProblems(k8sOne[*networkingv1.NetworkPolicy](t, docs, "inboxd"), daemon, podLabels) {
		t.Error(p)
	}
}

// k8sNetworkPolicyProblems lists what k8sCheckNetworkPolicy finds wrong.
func k8sNetworkPolicyProblems(np *networkingv1.NetworkPolicy, daemon corev1.Container, podLabels labels.Set) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || sel.Empty() || !sel.Matches(podLabels) {
		bad("NetworkPolicy selector %v does not select the pods %v (%v)", np.Spec.PodSelector, podLabels, err)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		bad("NetworkPolicy policyTypes %v: want Ingress", np.Spec.PolicyTypes)
	}
	admitted := map[int32]bool{}
	for i, rule := range np.Spec.Ingress {
		if len(rule.Ports) == 0 {
			bad("NetworkPolicy ingress rule %d names no port: it admits every port", i)
		}
		for _, p := range rule.Ports {
			if p.Port == nil {
				bad("NetworkPolicy ingress rule %d admits every port", i)
				continue
			}
			n, ok := k8sPortNumber(daemon, *p.Port)
			if !ok {
				bad("NetworkPolicy ingress rule %d admits port %s, which container %q does not serve", i, p.Port.String(), daemon.Name)
			}
			admitted[n] = true
		}
	}
	for _, cp := range daemon.Ports {
		if !admitted[cp.ContainerPort] {
			bad("NetworkPolicy admits nothing to port %s (%d): its clients cannot reach it", cp.Name, cp.ContainerPort)
		}
	}
	return out
}

// The NetworkPolicy check fails a policy that opens every port, one that
// forgets a port, and one that names a port nobody serves.
func TestK8sNetworkPolicyCatches(t *testing.T) {
	docs := chartRender(t, chartRenderings[1].values...) // with the webhook port
	dep := k8sOne[*appsv1.Deployment](t, docs, "inboxd")
	daemon, podLabels := dep.Spec.Template.Spec.Containers[0], labels.Set(dep.Spec.Template.Labels)
	shipped := k8sOne[*networkingv1.NetworkPolicy](t, docs, "inboxd")
	if p := k8sNetworkPolicyProblems(shipped, daemon, podLabels); len(p) > 0 {
		t.Fatalf("as rendered: %q", p)
	}
	for _, c := range []struct {
		name   string
		weaken func(*networkingv1.NetworkPolicy)
		want   string
	}{
		{"every port", func(np *networkingv1.NetworkPolicy) { np.Spec.Ingress[0].Ports = nil }, "names no port"},
		{"webhook port forgotten", func(np *networkingv1.NetworkPolicy) { np.Spec.Ingress = np.Spec.Ingress[:1] }, "admits nothing to port webhooks"},
		{"a port nobody serves", func(np *networkingv1.NetworkPolicy) {
			p := intstr.FromString("debug")
			np.Spec.Ingress[0].Ports[0].Port = &p
		}, "which container \"inboxd\" does not serve"},
	} {
		np := shipped.DeepCopy()
		c.weaken(np)
		got := k8sNetworkPolicyProblems(np, daemon, podLabels)
		if !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, c.want) }) {
			t.Errorf("%s: problems %q, want one with %q", c.name, got, c.want)
		}
	}
}
