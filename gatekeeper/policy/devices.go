package policy

import "strings"

// deviceAnnotations are the Pod annotations the bundle's resource model
// (data.ito.config.workload) takes to inject devices, read once at New.
type deviceAnnotations struct {
	prefixes []string        // device_annotation_prefixes
	keys     map[string]bool // device_annotation_keys, and each prefix without its trailing slash
}

// readDeviceAnnotations reads the lists from bundle data; a list that is
// absent, or a member that is no string, adds nothing (the policy's device
// annotation rules, ito.workload's access.rego, match nothing for a key
// that is no string, and a prefix that is none fails their evaluation:
// every review is denied).
func readDeviceAnnotations(data map[string]any) deviceAnnotations {
	d := deviceAnnotations{keys: map[string]bool{}}
	ito, _ := data["ito"].(map[string]any)
	cfg, _ := ito["config"].(map[string]any)
	model, _ := cfg["workload"].(map[string]any)
	prefixes, _ := model["device_annotation_prefixes"].([]any)
	for _, p := range prefixes {
		if s, ok := p.(string); ok {
			d.prefixes = append(d.prefixes, s)
			d.keys[strings.TrimSuffix(s, "/")] = true
		}
	}
	keys, _ := model["device_annotation_keys"].([]any)
	for _, k := range keys {
		if s, ok := k.(string); ok {
			d.keys[s] = true
		}
	}
	return d
}

// DeviceAnnotation reports whether the bundle takes Pod annotation key to
// inject devices into containers, as its policy does (ito.workload's
// device annotation rules): a key of device_annotation_keys, a key under a
// device_annotation_prefixes entry, or the entry without its trailing
// slash. The webhook asks it of an annotation an UPDATE adds or changes:
// such an UPDATE is no teardown, the policy judges it.
func (e *Engine) DeviceAnnotation(key string) bool {
	if e.devices.keys[key] {
		return true
	}
	for _, p := range e.devices.prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}
