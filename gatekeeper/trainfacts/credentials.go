package trainfacts

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// The credential scan: policies/ito/datasets (its facts.rego). Every string
// of the manifest, value or key, is matched against the bundle's credential
// patterns (data.ito.config.data.credentials), Go's regexp being OPA's
// regex.match; the result is the JSON pointer of every place that holds
// what looks like a credential, with its kinds, never the value.

type credentialPattern struct {
	kind string
	all  []*regexp.Regexp
}

type credentialConfig struct {
	patterns  []credentialPattern
	prefilter *regexp.Regexp // lib.credential_prefilter: every pattern's first regex, alternated
	lines     *regexp.Regexp // the same over the strings joined by newlines, (?m:...)
	secretKey *regexp.Regexp // secret_key_pattern (nil when the bundle has none)
	keyLines  *regexp.Regexp
	plain     *regexp.Regexp // a path segment shown as it is
}

func (m *Model) readCredentials(r *reader, cfg map[string]any) {
	if r.err != nil {
		return
	}
	compile := func(what, re string) *regexp.Regexp {
		x, err := regexp.Compile(re)
		if err != nil {
			r.fail("%s: %v", what, err)
		}
		return x
	}
	cc := credentialConfig{plain: regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)}
	var firsts []string
	if pats, ok := cfg["value_patterns"]; ok {
		arr, ok := pats.([]any)
		if !ok {
			r.fail("credentials.value_patterns is not an array")
			return
		}
		for i, p := range arr {
			o, _ := p.(map[string]any)
			kind, okKind := o["kind"].(string)
			all, okAll := o["all"].([]any)
			if !okKind || !okAll || len(all) == 0 {
				r.fail("credentials.value_patterns[%d] has no kind or no regex", i)
				return
			}
			cp := credentialPattern{kind: kind}
			for _, re := range all {
				s, ok := re.(string)
				if !ok {
					r.fail("credentials.value_patterns[%d] holds a regex that is not a string", i)
					return
				}
				cp.all = append(cp.all, compile(fmt.Sprintf("credentials.value_patterns[%d]", i), s))
			}
			firsts = append(firsts, all[0].(string))
			cc.patterns = append(cc.patterns, cp)
		}
	}
	prefilter := "(?:" + strings.Join(firsts, ")|(?:") + ")"
	cc.prefilter = compile("the credential prefilter", prefilter)
	cc.lines = compile("the credential prefilter", "(?m:"+prefilter+")")
	if sk, ok := cfg["secret_key_pattern"]; ok {
		s, ok := sk.(string)
		if !ok {
			r.fail("credentials.secret_key_pattern is not a string")
			return
		}
		cc.secretKey = compile("credentials.secret_key_pattern", s)
		cc.keyLines = compile("credentials.secret_key_pattern", "(?m:"+s+")")
	}
	m.creds = cc
}

// kinds is lib.credential_kinds(s): the kinds of the patterns s matches.
func (cc *credentialConfig) kinds(s string) []string {
	if !cc.prefilter.MatchString(s) {
		return nil
	}
	var out []string
	for _, p := range cc.patterns {
		match := true
		for _, re := range p.all {
			if !re.MatchString(s) {
				match = false
				break
			}
		}
		if match && !slices.Contains(out, p.kind) {
			out = append(out, p.kind)
		}
	}
	return out
}

// credentials is datasets._credentials_by_path: JSON pointer → sorted kinds.
func (m *Model) credentials(manifest any, hasManifest bool) map[string]any {
	out := map[string]any{}
	cc := &m.creds
	if !hasManifest {
		return out
	}
	// every distinct string value and object key (the sets the prefilter joins)
	values, keys := map[string]bool{}, map[string]bool{}
	var collect func(v any)
	collect = func(v any) {
		switch x := v.(type) {
		case string:
			values[x] = true
		case map[string]any:
			for k, e := range x {
				keys[k] = true
				collect(e)
			}
		case []any:
			for _, e := range x {
				collect(e)
			}
		}
	}
	collect(manifest)
	all := make([]string, 0, len(values)+len(keys))
	for s := range values {
		all = append(all, s)
	}
	for s := range keys {
		if !values[s] {
			all = append(all, s)
		}
	}
	slices.Sort(all)
	may := cc.lines.MatchString(strings.Join(all, "\n"))
	if !may && cc.keyLines != nil {
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		slices.Sort(sorted)
		may = cc.keyLines.MatchString(strings.Join(sorted, "\n"))
	}
	if !may {
		return out
	}
	credStrings := map[string][]string{}
	for _, s := range all {
		if k := cc.kinds(s); len(k) > 0 {
			credStrings[s] = k
		}
	}
	secretKeys := map[string]bool{}
	if cc.secretKey != nil {
		for k := range keys {
			if cc.secretKey.MatchString(k) {
				secretKeys[k] = true
			}
		}
	}
	if len(credStrings) == 0 && len(secretKeys) == 0 {
		return out
	}
	found := map[string]map[string]bool{}
	add := func(path []any, kinds ...string) {
		p := cc.pointer(path)
		if found[p] == nil {
			found[p] = map[string]bool{}
		}
		for _, k := range kinds {
			found[p][k] = true
		}
	}
	var walk func(path []any, v any)
	walk = func(path []any, v any) {
		if s, ok := v.(string); ok {
			if k := credStrings[s]; len(k) > 0 {
				add(path, k...)
			}
		}
		if n := len(path); n > 0 {
			if key, ok := path[n-1].(string); ok {
				if k := credStrings[key]; len(k) > 0 {
					add(path, k...)
				}
				if secretKeys[key] && !emptyValue(v) {
					add(path, "secret-named field")
				}
			}
		}
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(append(path[:len(path):len(path)], k), e)
			}
		case []any:
			for i, e := range x {
				walk(append(path[:len(path):len(path)], i), e)
			}
		}
	}
	walk(nil, manifest)
	for p, set := range found {
		kinds := make([]string, 0, len(set))
		for k := range set {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		arr := make([]any, len(kinds))
		for i, k := range kinds {
			arr[i] = k
		}
		out[p] = arr
	}
	return out
}

// emptyValue is `value in {"", null, false, {}, []}`.
func emptyValue(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case bool:
		return !x
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// pointer is datasets._pointer(path): a JSON pointer whose segments that
// are not plain names (or look like a credential) are withheld.
func (cc *credentialConfig) pointer(path []any) string {
	var b strings.Builder
	for _, seg := range path {
		b.WriteByte('/')
		switch s := seg.(type) {
		case int:
			fmt.Fprintf(&b, "%d", s)
		case string:
			if cc.plain.MatchString(s) && len(cc.kinds(s)) == 0 {
				b.WriteString(s)
			} else {
				b.WriteString("(withheld)")
			}
		}
	}
	return b.String()
}
