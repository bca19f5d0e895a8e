package trainfacts

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	ahocorasick "github.com/BobuSumisu/aho-corasick"
)

// The credential scan: policies/ito/datasets (its facts.rego). Every string
// of the manifest, value or key, is matched against the bundle's credential
// patterns (data.ito.config.data.credentials), Go's regexp being OPA's
// regex.match; the result is the JSON pointer of every place that holds
// what looks like a credential, with its kinds, never the value.

type credentialPattern struct {
	kind string
	all  []*regexp.Regexp
	// keywords: every match of the pattern holds one of them, lower-cased
	// (requiredLiterals); none: the pattern is always run
	keywords    []string
	hasKeywords bool
}

type credentialConfig struct {
	patterns  []credentialPattern
	prefilter *regexp.Regexp // lib.credential_prefilter: every pattern's first regex, alternated
	lines     *regexp.Regexp // the same over the strings joined by newlines, (?m:...)
	secretKey *regexp.Regexp // secret_key_pattern (nil when the bundle has none)
	keyLines  *regexp.Regexp
	plain     *regexp.Regexp // a path segment shown as it is
	// the secret-key pattern's keywords (requiredLiterals)
	keyKeywords    []string
	keyHasKeywords bool
	// keywordTrie finds every keyword of every pattern in one pass over
	// the folded strings (nil when no pattern has keywords); owners[k]
	// are the patterns keyword k belongs to, len(patterns) standing for
	// the secret-key pattern
	keywordTrie *ahocorasick.Trie
	owners      [][]int
	anyUnkeyed  bool // some value pattern has no keywords: it runs on every string
	// lineSafe: no pattern uses \A, \z or turns multi-line mode off, so a
	// string that matches on its own also matches the strings joined by
	// newlines (ito.datasets' test_patterns_are_line_safe): the joined
	// prefilter then finds nothing the string-by-string scan does not, and
	// the scan can skip it. Without it, the scan runs it as the reference does.
	lineSafe bool
}

// lineUnsafe is the test of test_patterns_are_line_safe.
var lineUnsafe = regexp.MustCompile(`\\[Az]|\(\?[a-zA-Z]*-[a-zA-Z]*m`)

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
	arr := r.arr(cfg, "value_patterns", "credentials.value_patterns")
	if r.err != nil {
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
			// a match of the pattern matches each of its regexes: the
			// keywords of any one of them are the pattern's
			if kw, ok := requiredLiterals(s); ok && !cp.hasKeywords {
				cp.keywords, cp.hasKeywords = kw, true
			}
		}
		firsts = append(firsts, all[0].(string))
		cc.patterns = append(cc.patterns, cp)
	}
	cc.lineSafe = true
	for _, f := range firsts {
		cc.lineSafe = cc.lineSafe && !lineUnsafe.MatchString(f)
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
		cc.lineSafe = cc.lineSafe && !lineUnsafe.MatchString(s)
		cc.secretKey = compile("credentials.secret_key_pattern", s)
		cc.keyKeywords, cc.keyHasKeywords = requiredLiterals(s)
		cc.keyLines = compile("credentials.secret_key_pattern", "(?m:"+s+")")
	}
	cc.buildKeywordTrie()
	m.creds = cc
}

// buildKeywordTrie indexes the keywords of every pattern, and of the
// secret-key pattern, in one Aho-Corasick automaton (gitleaks' keyword
// prefilter: a pattern runs only on strings that hold one of its keywords).
func (cc *credentialConfig) buildKeywordTrie() {
	ids := map[string]int{}
	var kws []string
	add := func(owner int, keywords []string) {
		for _, k := range keywords {
			id, ok := ids[k]
			if !ok {
				id = len(kws)
				ids[k] = id
				kws = append(kws, k)
				cc.owners = append(cc.owners, nil)
			}
			if !slices.Contains(cc.owners[id], owner) {
				cc.owners[id] = append(cc.owners[id], owner)
			}
		}
	}
	for i, p := range cc.patterns {
		if p.hasKeywords {
			add(i, p.keywords)
		} else {
			cc.anyUnkeyed = true
		}
	}
	if cc.keyHasKeywords {
		add(len(cc.patterns), cc.keyKeywords)
	}
	if len(kws) > 0 {
		cc.keywordTrie = ahocorasick.NewTrieBuilder().AddStrings(kws).Build()
	}
}

// keywordHits scans text (folded strings, each ended by a newline; string
// i is text[bounds[i]:bounds[i+1]-1]) once and returns which owners'
// keywords each string holds: bit o of row i (words uint64s per row). A
// keyword occurrence that spans a newline belongs to no string.
func (cc *credentialConfig) keywordHits(text []byte, bounds []int) (hits []uint64, words int) {
	words = (len(cc.patterns) + 1 + 63) / 64
	hits = make([]uint64, (len(bounds)-1)*words)
	if cc.keywordTrie == nil || len(bounds) < 2 {
		return hits, words
	}
	i := 0
	cc.keywordTrie.Walk(text, func(end, n, k int64) bool {
		e := int(end)
		for bounds[i+1] <= e { // matches come in order of their end
			i++
		}
		if e-int(n)+1 >= bounds[i] && e < bounds[i+1]-1 {
			for _, o := range cc.owners[k] {
				hits[i*words+o/64] |= 1 << (o % 64)
			}
		}
		return true
	})
	return hits, words
}

// mayHold is datasets._may_hold_credential: the prefilter over every
// string joined by newlines, or the secret-key pattern over the keys.
func (cc *credentialConfig) mayHold(all []string, isKey func(string) bool) bool {
	sorted := slices.Sorted(slices.Values(all))
	if cc.lines.MatchString(strings.Join(sorted, "\n")) {
		return true
	}
	if cc.keyLines == nil {
		return false
	}
	sorted = slices.DeleteFunc(sorted, func(s string) bool { return !isKey(s) })
	return cc.keyLines.MatchString(strings.Join(sorted, "\n"))
}

// kinds is lib.credential_kinds(s): the kinds of the patterns s matches.
// (lib's prefilter, the alternation of every pattern's first regex, matches
// whenever a pattern does: it adds nothing here.) A pattern whose keywords
// s does not hold cannot match it and is not run.
func (cc *credentialConfig) kinds(s string) []string {
	folded := fold(s)
	var out []string
	for _, p := range cc.patterns {
		if p.hasKeywords && !containsAny(folded, p.keywords) || slices.Contains(out, p.kind) {
			continue
		}
		if p.matches(s) {
			out = append(out, p.kind)
		}
	}
	return out
}

// matches reports whether s matches every regex of p.
func (p *credentialPattern) matches(s string) bool {
	for _, re := range p.all {
		if !re.MatchString(s) {
			return false
		}
	}
	return true
}

// credentials is datasets._credentials_by_path: JSON pointer → sorted kinds.
func (m *Model) credentials(manifest any, hasManifest bool) map[string]any {
	out := map[string]any{}
	cc := &m.creds
	if !hasManifest {
		return out
	}
	// every distinct string value and object key (the sets the prefilter
	// joins), with its roles: a value, a key, or both
	const valueRole, keyRole = 1, 2
	roles := make(map[string]uint8, 128)
	var collect func(v any)
	collect = func(v any) {
		switch x := v.(type) {
		case string:
			roles[x] |= valueRole
		case map[string]any:
			for k, e := range x {
				roles[k] |= keyRole
				collect(e)
			}
		case []any:
			for _, e := range x {
				collect(e)
			}
		}
	}
	collect(manifest)
	all := make([]string, 0, len(roles))
	for s := range roles {
		all = append(all, s)
	}
	isKey := func(s string) bool { return roles[s]&keyRole != 0 }
	if !cc.lineSafe && !cc.mayHold(all, isKey) {
		return out
	}
	// every keyword of every pattern, found in one pass over the folded
	// strings joined by newlines: a pattern is tried on a string only when
	// the string holds one of its keywords (or the pattern has none)
	buf := make([]byte, 0, 64*len(all))
	bounds := make([]int, len(all)+1)
	for i, s := range all {
		buf = appendFold(buf, s)
		buf = append(buf, '\n')
		bounds[i+1] = len(buf)
	}
	hits, words := cc.keywordHits(buf, bounds)
	holds := func(i, owner int) bool { return hits[i*words+owner/64]&(1<<(owner%64)) != 0 }
	credStrings := map[string][]string{}
	for i, s := range all {
		if !cc.anyUnkeyed && !slices.ContainsFunc(hits[i*words:(i+1)*words], func(w uint64) bool { return w != 0 }) {
			continue // no pattern can match s
		}
		var kinds []string
		for p := range cc.patterns {
			pat := &cc.patterns[p]
			if pat.hasKeywords && !holds(i, p) || slices.Contains(kinds, pat.kind) {
				continue
			}
			if pat.matches(s) {
				kinds = append(kinds, pat.kind)
			}
		}
		if len(kinds) > 0 {
			credStrings[s] = kinds
		}
	}
	secretKeys := map[string]bool{}
	if cc.secretKey != nil {
		for i, k := range all {
			if !isKey(k) || cc.keyHasKeywords && !holds(i, len(cc.patterns)) {
				continue
			}
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

// requiredLiterals returns strings of which every match of re contains one
// (folded: compared without case, which containment with case implies), and whether
// there is such a set: gitleaks' keywords, derived from the pattern itself
// so that they cannot be wrong. A pattern without them is always run.
func requiredLiterals(re string) ([]string, bool) {
	tree, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return nil, false
	}
	lits, ok := required(tree.Simplify())
	if !ok || len(lits) == 0 {
		return nil, false
	}
	for _, l := range lits {
		if l == "" {
			return nil, false
		}
	}
	return lits, true
}

func required(re *syntax.Regexp) ([]string, bool) {
	switch re.Op {
	case syntax.OpLiteral:
		return []string{fold(string(re.Rune))}, true
	case syntax.OpCapture:
		return required(re.Sub[0])
	case syntax.OpPlus:
		return required(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return required(re.Sub[0])
		}
	case syntax.OpConcat:
		// any sub's requirement holds for the whole; take the one whose
		// shortest literal is longest
		var best []string
		bestLen := 0
		for _, sub := range re.Sub {
			lits, ok := required(sub)
			if !ok {
				continue
			}
			shortest := len(lits[0])
			for _, l := range lits {
				shortest = min(shortest, len(l))
			}
			if shortest > bestLen {
				best, bestLen = lits, shortest
			}
		}
		return best, best != nil
	case syntax.OpAlternate:
		var all []string
		for _, sub := range re.Sub {
			lits, ok := required(sub)
			if !ok {
				return nil, false
			}
			all = append(all, lits...)
		}
		return all, true
	}
	return nil, false
}

// fold maps every rune to the smallest rune of its case-folding orbit
// (unicode.SimpleFold), as (?i) matches: S, s and the long s are all S; K, k
// and the Kelvin sign are all K. Two strings that match each other without case
// fold to the same string.
func fold(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToUpper(s)
	}
	var b strings.Builder
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// appendFold appends fold(s) to buf, without allocating for ASCII.
func appendFold(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return append(buf, fold(s)...)
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		buf = append(buf, c)
	}
	return buf
}

// containsAny reports whether folded (a folded string) holds one of lits.
func containsAny(lower string, lits []string) bool {
	for _, l := range lits {
		if strings.Contains(lower, l) {
			return true
		}
	}
	return false
}
