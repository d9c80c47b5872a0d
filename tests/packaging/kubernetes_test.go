package packaging

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/comfygate/comfygate/tests/gateway"
)

// kubeDir is deploy/kubernetes of this checkout.
func kubeDir(t *testing.T) string { return filepath.Join(gateway.RepoRoot(t), "deploy", "kubernetes") }

// TestKubernetesManifestsDecode decodes every YAML file under
// deploy/kubernetes strictly against the Kubernetes API types (KEDA's
// ScaledObject against its documented fields), and every kustomization as
// kubectl kustomize renders it. A misspelt or misplaced field fails: the
// test first checks that the decoder refuses one.
func TestKubernetesManifestsDecode(t *testing.T) {
	dir := kubeDir(t)
	deployment, err := os.ReadFile(filepath.Join(dir, "gateway", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	typo := strings.Replace(string(deployment), "readinessProbe:", "readinesProbe:", 1)
	if _, err := decodeManifests([]byte(typo)); err == nil || !strings.Contains(err.Error(), "readinesProbe") {
		t.Fatalf("a misspelt field decoded without the error naming it: %v", err)
	}

	var kustomizations []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.Name() == "kustomization.yaml" {
			k := readKustomization(t, filepath.Dir(path))
			for _, r := range k.Resources {
				if _, err := os.Stat(filepath.Join(filepath.Dir(path), r)); err != nil {
					t.Errorf("%s names resource %s: %v", rel, r, err)
				}
			}
			kustomizations = append(kustomizations, filepath.Dir(path))
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		objs, err := decodeManifests(data)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
		} else if len(objs) == 0 {
			t.Errorf("%s holds no manifest", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(kustomizations) < 5 {
		t.Fatalf("found kustomizations %v, want the top one, gateway and comfyui's base, keda and hpa", kustomizations)
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Logf("kubectl is not installed: the kustomizations were read but not rendered (%v)", err)
		return
	}
	for _, k := range kustomizations {
		if objs := renderKustomization(t, k); len(objs) == 0 {
			t.Errorf("kubectl kustomize %s rendered nothing", k)
		}
	}
}

// adaptedConfig is the part of an adapted Caddy config these checks read.
type adaptedConfig struct {
	Admin struct {
		Disabled bool   `json:"disabled"`
		Listen   string `json:"listen"`
	} `json:"admin"`
	Apps struct {
		HTTP struct {
			GracePeriod int64 `json:"grace_period"`
			Servers     map[string]struct {
				Listen []string        `json:"listen"`
				Routes json.RawMessage `json:"routes"`
			} `json:"servers"`
		} `json:"http"`
		Comfygate map[string]any `json:"comfygate"`
	} `json:"apps"`
}

// adapt runs `comfygate adapt` on a Caddyfile with env, as the gateway
// would read it at start.
func adapt(t *testing.T, caddyfile string, env ...string) (adaptedConfig, []byte) {
	t.Helper()
	cmd := exec.Command(gateway.Binary(t), "adapt", "--config", caddyfile, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), env...)
	out := []byte(output(t, cmd))
	var cfg adaptedConfig
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("adapted %s: %v", caddyfile, err)
	}
	return cfg, out
}

// cluster is what deploy/kubernetes applies: its top kustomization, rendered.
type cluster struct {
	namespace string
	objs      []object
	gateway   *appsv1.Deployment
	container corev1.Container
	env       map[string]corev1.EnvVar
	caddyfile string // the ConfigMap's Caddyfile, written to a file
	cfg       adaptedConfig
}

// loadCluster renders deploy/kubernetes (or, without kubectl, decodes its
// files directly) and adapts the gateway's ConfigMap Caddyfile with the
// Deployment's environment.
func loadCluster(t *testing.T) cluster {
	t.Helper()
	dir := kubeDir(t)
	c := cluster{namespace: readKustomization(t, dir).Namespace}
	if c.objs = renderKustomization(t, dir); c.objs == nil {
		t.Log("kubectl is not installed: checking the manifest files as written, not rendered")
		for _, f := range []string{"namespace.yaml", "gateway/deployment.yaml", "gateway/service.yaml", "gateway/pdb.yaml",
			"comfyui/base/deployment.yaml", "comfyui/base/service.yaml", "comfyui/keda/scaledobject.yaml"} {
			c.objs = append(c.objs, decodeFile(t, filepath.Join(dir, f))...)
		}
	}
	rendered := renderedWithKubectl()
	for _, o := range c.objs {
		if _, ok := o.(*corev1.Namespace); rendered && !ok && o.GetNamespace() != c.namespace {
			t.Errorf("%T %s is in namespace %q, want %q", o, o.GetName(), o.GetNamespace(), c.namespace)
		}
	}
	c.gateway = find[*appsv1.Deployment](t, c.objs, "comfygate")
	if n := len(c.gateway.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("the gateway pod has %d containers, want 1", n)
	}
	c.container = c.gateway.Spec.Template.Spec.Containers[0]
	c.env = map[string]corev1.EnvVar{}
	for _, e := range c.container.Env {
		c.env[e.Name] = e
	}

	// The Caddyfile the pod reads: the ConfigMap mounted at /etc/comfygate.
	caddyfile, err := os.ReadFile(filepath.Join(dir, "gateway", "Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	if rendered {
		cm := find[*corev1.ConfigMap](t, c.objs, "comfygate-caddyfile")
		if cm.Data["Caddyfile"] != string(caddyfile) {
			t.Errorf("the ConfigMap %s does not hold gateway/Caddyfile", cm.Name)
		}
		checkVolumeMount(t, c.gateway, c.container, cm.Name, "/etc/comfygate")
	}
	if !slices.Equal(c.container.Args, []string{"run", "--config", "/etc/comfygate/Caddyfile"}) {
		t.Errorf("the gateway's args are %q, want run --config /etc/comfygate/Caddyfile", c.container.Args)
	}
	c.caddyfile = filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(c.caddyfile, caddyfile, 0o644); err != nil {
		t.Fatal(err)
	}
	site, ok := c.env["COMFYGATE_SITE"]
	if !ok || site.Value == "" {
		t.Fatal("the Deployment does not set COMFYGATE_SITE, the site address")
	}
	c.cfg, _ = adapt(t, c.caddyfile, "COMFYGATE_SITE="+site.Value)
	return c
}

// renderedWithKubectl reports whether loadCluster rendered with kubectl.
func renderedWithKubectl() bool { _, err := exec.LookPath("kubectl"); return err == nil }

// checkVolumeMount checks that the container mounts the ConfigMap named
// configMap at path.
func checkVolumeMount(t *testing.T, d *appsv1.Deployment, c corev1.Container, configMap, path string) {
	t.Helper()
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.ConfigMap == nil || v.ConfigMap.Name != configMap {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name && m.MountPath == path && m.ReadOnly {
				return
			}
		}
	}
	t.Errorf("the gateway does not mount the ConfigMap %s read-only at %s", configMap, path)
}

// serverOn returns the adapted server listening on port, failing when
// there is none.
func (c cluster) serverOn(t *testing.T, port int32) json.RawMessage {
	t.Helper()
	for _, s := range c.cfg.Apps.HTTP.Servers {
		for _, l := range s.Listen {
			if _, p, err := net.SplitHostPort(l); err == nil && p == strconv.Itoa(int(port)) {
				return s.Routes
			}
		}
	}
	t.Fatalf("the gateway's config listens on no port %d (servers %v)", port, c.cfg.Apps.HTTP.Servers)
	return nil
}

// containerPort returns the gateway container's port named name.
func (c cluster) containerPort(t *testing.T, name string) int32 {
	t.Helper()
	for _, p := range c.container.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("the gateway container has no port named %s", name)
	return 0
}

// TestKubernetesGatewayConfig cross-checks the gateway's manifests with the
// config the gateway reads from its ConfigMap (adapted by the real
// adapter) and with the docs: probes and Services on the ports the config
// listens on, the admin endpoint on the pod's loopback and behind no port,
// a termination grace that covers the preStop pause and the config's
// grace_period, every {env.X} of the config set (the secrets from the
// Secret), a non-root read-only container with a writable /data, and a
// config that is the hosted-cloud example's with only the documented
// changes.
func TestKubernetesGatewayConfig(t *testing.T) {
	c := loadCluster(t)
	spec := c.gateway.Spec.Template.Spec

	// Probes: the site that carries comfy_health, on the port named http.
	httpPort := c.containerPort(t, "http")
	routes := string(c.serverOn(t, httpPort))
	if !strings.Contains(routes, `"handler":"comfy_health"`) {
		t.Errorf("the server on :%d (the probes' port) has no comfy_health", httpPort)
	}
	probes := map[string]*corev1.Probe{"readiness": c.container.ReadinessProbe, "liveness": c.container.LivenessProbe}
	wantPath := map[string]string{"readiness": "/readyz", "liveness": "/healthz"} // docs/operations.md, Health
	for kind, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no %s probe over HTTP", kind)
			continue
		}
		if p.HTTPGet.Path != wantPath[kind] || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe on %s port %s, want %s on port http", kind, p.HTTPGet.Path, p.HTTPGet.Port.String(), wantPath[kind])
		}
		if p.TimeoutSeconds <= 2 {
			t.Errorf("%s probe timeout %ds: comfy_health's backend checks take up to 2s", kind, p.TimeoutSeconds)
		}
	}

	// The admin endpoint: loopback only, and no port or Service reaches it.
	if !c.cfg.Admin.Disabled {
		host, port, err := net.SplitHostPort(c.cfg.Admin.Listen)
		if err != nil || net.ParseIP(host) == nil || !net.ParseIP(host).IsLoopback() {
			t.Errorf("admin listens on %q, want a loopback address (or admin off)", c.cfg.Admin.Listen)
		}
		for _, p := range c.container.Ports {
			if strconv.Itoa(int(p.ContainerPort)) == port {
				t.Errorf("the container exposes the admin port %s as %s", port, p.Name)
			}
		}
		if _, ok := c.env["CADDY_ADMIN"]; ok {
			t.Error("CADDY_ADMIN is set: it would move the admin endpoint")
		}
	}

	// The internal site: metrics and scale signals, nothing of the admin API.
	internalPort := c.containerPort(t, "internal")
	internal := string(c.serverOn(t, internalPort))
	for _, want := range []string{`"handler":"metrics"`, `"handler":"reverse_proxy"`, `"dial":"` + c.cfg.Admin.Listen + `"`, `^/comfygate/scale/`} {
		if !strings.Contains(internal, want) {
			t.Errorf("the server on :%d lacks %s: %s", internalPort, want, internal)
		}
	}

	// Services: the API on port http, the internal site on port internal.
	for name, target := range map[string]string{"comfygate": "http", "comfygate-internal": "internal"} {
		svc := find[*corev1.Service](t, c.objs, name)
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != target {
			t.Errorf("Service %s ports %v, want one to target port %s", name, svc.Spec.Ports, target)
		}
		checkSelects(t, "Service "+name, svc.Spec.Selector, c.gateway)
	}
	pdb := find[*policyv1.PodDisruptionBudget](t, c.objs, "comfygate")
	if pdb.Spec.Selector == nil || pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
		t.Error("the PodDisruptionBudget bounds nothing")
	} else {
		checkSelects(t, "the PodDisruptionBudget", pdb.Spec.Selector.MatchLabels, c.gateway)
	}
	if r := c.gateway.Spec.Replicas; r == nil || *r < 2 {
		t.Errorf("the gateway runs %v replicas, want several", deref(r))
	}

	// Termination: preStop, then SIGTERM, then the servers' grace_period
	// (in-flight uploads), then the app handing its attempts back.
	var preStop int64
	if l := c.container.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Sleep != nil {
		preStop = l.PreStop.Sleep.Seconds
	} else {
		t.Error("no preStop sleep: the endpoints would still route to a stopping pod")
	}
	grace := time.Duration(c.cfg.Apps.HTTP.GracePeriod)
	if grace <= 0 {
		t.Error("the config sets no grace_period: SIGTERM would cut uploads off at once")
	}
	const appStop = 10 // seconds for the comfygate app to stop after the servers
	need := preStop + int64(grace.Seconds()) + appStop
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g < need {
		t.Errorf("terminationGracePeriodSeconds %v < preStop %ds + grace_period %s + %ds", deref(g), preStop, grace, appStop)
	}

	// Every {env.X} and {$X} of the config is set; the secrets come from
	// the Secret whose keys secret.example.yaml lists.
	body, _ := os.ReadFile(c.caddyfile)
	exampleSecret := readSecretExample(t)
	for _, m := range regexp.MustCompile(`\{(?:env\.|\$)([A-Z0-9_]+)`).FindAllStringSubmatch(string(body), -1) {
		e, ok := c.env[m[1]]
		switch {
		case !ok:
			t.Errorf("the config reads %s, which the Deployment does not set", m[1])
		case strings.Contains(m[1], "DSN") || strings.Contains(m[1], "REDIS_URL") || strings.HasSuffix(m[1], "_KEY"):
			ref := e.ValueFrom
			if ref == nil || ref.SecretKeyRef == nil {
				t.Errorf("%s is a secret but not from a Secret", m[1])
			} else if _, ok := exampleSecret.StringData[ref.SecretKeyRef.Key]; !ok || ref.SecretKeyRef.Name != exampleSecret.Name {
				t.Errorf("%s comes from %s/%s, which secret.example.yaml lacks", m[1], ref.SecretKeyRef.Name, ref.SecretKeyRef.Key)
			}
		}
	}

	// Security: the image's non-root user, nothing writable but /data.
	psc, sc := spec.SecurityContext, c.container.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != imageUID {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and runAsUser %d (the image's USER)", psc, imageUID)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("container securityContext %+v: want a read-only root, no privilege escalation, every capability dropped", sc)
	}
	dataMounted := false
	for _, m := range c.container.VolumeMounts {
		dataMounted = dataMounted || m.MountPath == "/data" && !m.ReadOnly
	}
	if !dataMounted {
		t.Error("nothing writable at /data, where Caddy keeps its data (XDG_DATA_HOME in the image)")
	}

	checkDerivedFromCloud(t, c)
}

// deref is what p points to, for messages.
func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// imageUID is the user the Containerfile runs as.
const imageUID = 65532

// checkSelects checks that selector picks the deployment's pods.
func checkSelects(t *testing.T, what string, selector map[string]string, d *appsv1.Deployment) {
	t.Helper()
	if len(selector) == 0 || !labels.SelectorFromSet(selector).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("%s selects %v, which the pods of %s (%v) do not match", what, selector, d.Name, d.Spec.Template.Labels)
	}
}

// readSecretExample decodes gateway/secret.example.yaml.
func readSecretExample(t *testing.T) *corev1.Secret {
	t.Helper()
	objs := decodeFile(t, filepath.Join(kubeDir(t), "gateway", "secret.example.yaml"))
	if len(objs) != 1 {
		t.Fatalf("secret.example.yaml holds %d objects, want the Secret", len(objs))
	}
	return objs[0].(*corev1.Secret)
}

// checkDerivedFromCloud checks that the ConfigMap's config is
// caddyfile-examples/cloud.Caddyfile with only the changes its header
// lists: the admin endpoint pinned to loopback, the pool gpu as the jobs'
// default, and the internal site.
func checkDerivedFromCloud(t *testing.T, c cluster) {
	t.Helper()
	site := c.env["COMFYGATE_SITE"].Value
	cloud, _ := adapt(t, filepath.Join(gateway.RepoRoot(t), "caddyfile-examples", "cloud.Caddyfile"), "COMFYGATE_SITE="+site)
	if cloud.Apps.HTTP.GracePeriod != c.cfg.Apps.HTTP.GracePeriod {
		t.Errorf("grace_period %d, the cloud example's %d", c.cfg.Apps.HTTP.GracePeriod, cloud.Apps.HTTP.GracePeriod)
	}
	if len(cloud.Apps.HTTP.Servers) != 1 {
		t.Fatalf("the cloud example has %d servers", len(cloud.Apps.HTTP.Servers))
	}
	for _, s := range cloud.Apps.HTTP.Servers {
		_, port, _ := net.SplitHostPort(s.Listen[0])
		p, _ := strconv.Atoi(port)
		if got := c.serverOn(t, int32(p)); string(got) != string(s.Routes) {
			t.Errorf("the site differs from the cloud example's:\n%s\nwant\n%s", got, s.Routes)
		}
	}
	if len(c.cfg.Apps.HTTP.Servers) != 2 {
		t.Errorf("%d servers, want the cloud example's site and the internal one", len(c.cfg.Apps.HTTP.Servers))
	}
	app := c.cfg.Apps.Comfygate
	delete(app, "pools")
	if jobs, ok := app["jobs"].(map[string]any); !ok || jobs["default_pool"] != "gpu" {
		t.Errorf("the jobs block's default_pool is not gpu: %v", app["jobs"])
	} else {
		delete(jobs, "default_pool")
	}
	if !reflect.DeepEqual(app, cloud.Apps.Comfygate) {
		t.Errorf("the comfygate app differs from the cloud example's beyond the pool:\n%v\nwant\n%v", app, cloud.Apps.Comfygate)
	}
}

// poolConfig is a comfyui pool of the adapted comfygate app.
type poolConfig struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	DNS  []struct {
		Name string `json:"name"`
	} `json:"dns"`
	Scale struct {
		MinWorkers int32 `json:"min_workers"`
		MaxWorkers int32 `json:"max_workers"`
	} `json:"scale"`
}

// TestKubernetesComfyUIPool cross-checks the ComfyUI pool's manifests with
// the gateway's config and docs/comfyui.md: the headless Service gives the
// SRV name the pool reads, the ScaledObject reads the pool's signal
// (desiredWorkers) from the internal Service within the pool's bounds, and
// the HPA alternative the metric the gateway exports.
func TestKubernetesComfyUIPool(t *testing.T) {
	c := loadCluster(t)
	_, raw := adapt(t, c.caddyfile, "COMFYGATE_SITE="+c.env["COMFYGATE_SITE"].Value)
	var cfg struct {
		Apps struct {
			Comfygate struct {
				Pools []poolConfig `json:"pools"`
			} `json:"comfygate"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	var pool poolConfig
	for _, p := range cfg.Apps.Comfygate.Pools {
		if p.Name == "gpu" && p.Kind == "comfyui" {
			pool = p
		}
	}
	if pool.Name == "" || len(pool.DNS) != 1 {
		t.Fatalf("the config has no comfyui pool gpu with one workers dns: %+v", cfg.Apps.Comfygate.Pools)
	}

	comfy := find[*appsv1.Deployment](t, c.objs, "comfyui-gpu")
	svc := find[*corev1.Service](t, c.objs, "comfyui-gpu")
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service comfyui-gpu is not headless: its DNS would answer one virtual IP, not the workers")
	}
	checkSelects(t, "Service comfyui-gpu", svc.Spec.Selector, comfy)
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("Service comfyui-gpu has %d ports", len(svc.Spec.Ports))
	}
	srv := fmt.Sprintf("_%s._tcp.%s.%s.svc.cluster.local", svc.Spec.Ports[0].Name, svc.Name, c.namespace)
	if pool.DNS[0].Name != srv {
		t.Errorf("the pool reads SRV %s; the headless Service answers %s", pool.DNS[0].Name, srv)
	}
	if comfy.Spec.Replicas != nil {
		t.Errorf("the ComfyUI Deployment sets replicas %d, which every apply would reset under the autoscaler", *comfy.Spec.Replicas)
	}
	if g := comfy.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g < 300 {
		t.Errorf("the ComfyUI pods' termination grace %v is shorter than a long job", deref(g))
	}
	if l := comfy.Spec.Template.Spec.Containers[0].Lifecycle; l == nil || l.PreStop == nil {
		t.Error("the ComfyUI pods have no preStop to finish their jobs")
	}

	// KEDA: the metrics-api trigger on the internal Service's scale signal.
	so := find[*scaledObject](t, c.objs, "comfyui-gpu")
	if so.Spec.ScaleTargetRef.Name != comfy.Name {
		t.Errorf("the ScaledObject scales %q, want %s", so.Spec.ScaleTargetRef.Name, comfy.Name)
	}
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount != pool.Scale.MinWorkers ||
		so.Spec.MaxReplicaCount == nil || *so.Spec.MaxReplicaCount != pool.Scale.MaxWorkers {
		t.Errorf("the ScaledObject's replicas %v..%v differ from the pool's min_workers %d, max_workers %d",
			deref(so.Spec.MinReplicaCount), deref(so.Spec.MaxReplicaCount), pool.Scale.MinWorkers, pool.Scale.MaxWorkers)
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "metrics-api" {
		t.Fatalf("the ScaledObject's triggers %+v, want one metrics-api", so.Spec.Triggers)
	}
	md := so.Spec.Triggers[0].Metadata
	for k := range md {
		if !metricsAPIKeys[k] {
			t.Errorf("metrics-api trigger metadata %q is no parameter of the scaler", k)
		}
	}
	u, err := url.Parse(md["url"])
	if err != nil {
		t.Fatal(err)
	}
	internal := find[*corev1.Service](t, c.objs, "comfygate-internal")
	wantHost := fmt.Sprintf("%s.%s.svc.cluster.local:%d", internal.Name, c.namespace, internal.Spec.Ports[0].Port)
	if u.Host != wantHost || u.Path != "/comfygate/scale/"+pool.Name {
		t.Errorf("the trigger reads %s, want http://%s/comfygate/scale/%s", md["url"], wantHost, pool.Name)
	}
	// docs/comfyui.md: one replica per desired worker, 0 → 1 at once.
	if md["format"] != "json" || md["valueLocation"] != "desiredWorkers" || md["targetValue"] != "1" || md["activationTargetValue"] != "0" {
		t.Errorf("the trigger reads %v, want format json, valueLocation desiredWorkers, targetValue 1, activationTargetValue 0", md)
	}
	checkDocumentedTrigger(t, md)

	// The HPA alternative, in comfyui/hpa.
	hpaObjs := renderKustomization(t, filepath.Join(kubeDir(t), "comfyui", "hpa"))
	if hpaObjs == nil {
		hpaObjs = decodeFile(t, filepath.Join(kubeDir(t), "comfyui", "hpa", "hpa.yaml"))
	}
	hpa := find[*autoscalingv2.HorizontalPodAutoscaler](t, hpaObjs, "comfyui-gpu")
	if hpa.Spec.ScaleTargetRef.Name != comfy.Name || hpa.Spec.MaxReplicas != pool.Scale.MaxWorkers {
		t.Errorf("the HPA scales %s up to %d, want %s up to the pool's max_workers %d",
			hpa.Spec.ScaleTargetRef.Name, hpa.Spec.MaxReplicas, comfy.Name, pool.Scale.MaxWorkers)
	}
	if len(hpa.Spec.Metrics) != 1 || hpa.Spec.Metrics[0].External == nil ||
		hpa.Spec.Metrics[0].External.Metric.Name != "comfygate_pool_desired_workers" ||
		hpa.Spec.Metrics[0].External.Metric.Selector == nil ||
		hpa.Spec.Metrics[0].External.Metric.Selector.MatchLabels["pool"] != pool.Name {
		t.Errorf("the HPA's metrics %+v, want the external comfygate_pool_desired_workers{pool=%q}", hpa.Spec.Metrics, pool.Name)
	}
}

// checkDocumentedTrigger checks that docs/comfyui.md's ScaledObject
// example reads the signal as the shipped one does.
func checkDocumentedTrigger(t *testing.T, md map[string]string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(gateway.RepoRoot(t), "docs", "comfyui.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"url", "format", "valueLocation", "targetValue", "activationTargetValue"} {
		want := regexp.MustCompile(`(?m)^\s+` + k + `: "?` + regexp.QuoteMeta(md[k]) + `"?(\s|$)`)
		if !want.Match(doc) {
			t.Errorf("docs/comfyui.md's ScaledObject does not read %s: %s", k, md[k])
		}
	}
}
