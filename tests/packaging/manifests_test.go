package packaging

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// manifestTypes maps each apiVersion/kind that deploy/kubernetes holds to
// the Go type it decodes into: the Kubernetes API's own types, and for
// KEDA's ScaledObject (a CRD) the struct below. A kind missing here fails
// the test, so every manifest is decoded.
var manifestTypes = map[string]func() object{
	"v1/Namespace":                           func() object { return new(corev1.Namespace) },
	"v1/Service":                             func() object { return new(corev1.Service) },
	"v1/Secret":                              func() object { return new(corev1.Secret) },
	"v1/ConfigMap":                           func() object { return new(corev1.ConfigMap) },
	"apps/v1/Deployment":                     func() object { return new(appsv1.Deployment) },
	"policy/v1/PodDisruptionBudget":          func() object { return new(policyv1.PodDisruptionBudget) },
	"autoscaling/v2/HorizontalPodAutoscaler": func() object { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"keda.sh/v1alpha1/ScaledObject":          func() object { return new(scaledObject) },
}

// object is a decoded manifest.
type object interface {
	GetName() string
	GetNamespace() string
}

// scaledObject is KEDA's ScaledObject (keda.sh/v1alpha1) with the fields
// KEDA's ScaledObject specification documents, so that strict decoding
// refuses any other. KEDA's own API module is not used: it brings a large
// dependency tree (controller-runtime and the scalers' clients) for one type.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion             string `json:"apiVersion,omitempty"`
			Kind                   string `json:"kind,omitempty"`
			Name                   string `json:"name"`
			EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
		} `json:"scaleTargetRef"`
		PollingInterval       *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod        *int32 `json:"cooldownPeriod,omitempty"`
		InitialCooldownPeriod *int32 `json:"initialCooldownPeriod,omitempty"`
		IdleReplicaCount      *int32 `json:"idleReplicaCount,omitempty"`
		MinReplicaCount       *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount       *int32 `json:"maxReplicaCount,omitempty"`
		Fallback              *struct {
			FailureThreshold int32  `json:"failureThreshold"`
			Replicas         int32  `json:"replicas"`
			Behavior         string `json:"behavior,omitempty"`
		} `json:"fallback,omitempty"`
		Advanced *struct {
			RestoreToOriginalReplicaCount bool `json:"restoreToOriginalReplicaCount,omitempty"`
			HorizontalPodAutoscalerConfig *struct {
				Name     string                                         `json:"name,omitempty"`
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type              string            `json:"type"`
			Name              string            `json:"name,omitempty"`
			Metadata          map[string]string `json:"metadata"`
			MetricType        string            `json:"metricType,omitempty"`
			UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

// metricsAPIKeys are the metadata keys KEDA's metrics-api scaler reads
// (its documentation's parameter list): metadata is a free map in the CRD,
// so a misspelt key would be ignored by the cluster and KEDA alike.
var metricsAPIKeys = map[string]bool{
	"url": true, "format": true, "valueLocation": true, "targetValue": true,
	"activationTargetValue": true, "unsafeSsl": true, "authMode": true,
	"method": true, "keyParamName": true,
}

// kustomization is kustomize's Kustomization with the fields these
// manifests may use; `kubectl kustomize` checks the rest of its meaning.
type kustomization struct {
	APIVersion         string   `json:"apiVersion"`
	Kind               string   `json:"kind"`
	Namespace          string   `json:"namespace,omitempty"`
	Resources          []string `json:"resources"`
	ConfigMapGenerator []struct {
		Name     string   `json:"name"`
		Files    []string `json:"files,omitempty"`
		Literals []string `json:"literals,omitempty"`
	} `json:"configMapGenerator,omitempty"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images,omitempty"`
}

// decodeManifests decodes every YAML document of data strictly (unknown and
// duplicate fields are errors) into its kind's type.
func decodeManifests(data []byte) ([]object, error) {
	reader := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []object
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if meta.APIVersion == "" && meta.Kind == "" {
			continue // comments only
		}
		newObj, ok := manifestTypes[meta.APIVersion+"/"+meta.Kind]
		if !ok {
			return nil, fmt.Errorf("document %d: no type for %s %s", i, meta.APIVersion, meta.Kind)
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("document %d (%s %s): %w", i, meta.Kind, obj.GetName(), err)
		}
		objs = append(objs, obj)
	}
}

// readKustomization decodes dir's kustomization.yaml strictly.
func readKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("%s/kustomization.yaml is %s %s", dir, k.APIVersion, k.Kind)
	}
	return k
}

// renderKustomization renders dir with `kubectl kustomize` (kustomize built
// into kubectl; no cluster involved) and decodes what it prints. It returns
// nil when kubectl is not installed.
func renderKustomization(t *testing.T, dir string) []object {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		return nil
	}
	objs, err := decodeManifests([]byte(runIn(t, "", kubectl, "kustomize", dir)))
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	return objs
}

// decodeFile decodes the manifests of a file strictly.
func decodeFile(t *testing.T, path string) []object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeManifests(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return objs
}

// find returns the one object of type T named name.
func find[T object](t *testing.T, objs []object, name string) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok && strings.HasPrefix(v.GetName(), name) && (v.GetName() == name || generatedName(v.GetName(), name)) {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d objects %T named %s, want 1", len(found), zero, name)
	}
	return found[0]
}

// generatedName reports whether got is name with the hash suffix kustomize
// gives a generated ConfigMap (<name>-<10 characters>).
func generatedName(got, name string) bool {
	suffix := strings.TrimPrefix(got, name+"-")
	return suffix != got && len(suffix) == 10 && !strings.Contains(suffix, "-")
}
