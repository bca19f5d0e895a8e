package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	opabundle "github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/keys"

	"github.com/itocompute/itogate/gatekeeper/verify"
)

// Default limits of a bundle archive. The policy bundle is tens of KiB; the
// limits only stop a hostile or broken archive from exhausting memory.
const (
	DefaultMaxBytes         = 16 << 20 // compressed archive
	DefaultMaxUnpackedBytes = 64 << 20 // all files together, uncompressed
	DefaultMaxFiles         = 4096
)

// Root is the only bundle root itogate accepts: a bundle may define
// data.ito and nothing else.
const Root = "ito"

// Entrypoint is the package and rule every bundle must define
// (policy.Query).
const (
	entrypointPackage = "data.ito.admission"
	entrypointRule    = "decision"
)

const (
	manifestFile   = ".manifest"
	signaturesFile = ".signatures.json"
)

// Key is one bundle verification key: its key id (the "kid" the signer
// puts in .signatures.json), algorithm and PEM public key.
type Key struct {
	ID        string
	Algorithm string
	PEM       []byte
}

// Fingerprint is verify.Fingerprint of the public key ("" if it does not
// parse).
func (k Key) Fingerprint() string {
	pub, err := verify.LoadPublicKeyPEM(k.PEM)
	if err != nil {
		return ""
	}
	return verify.Fingerprint(pub)
}

// VerifierOptions configure a Verifier.
type VerifierOptions struct {
	// Keys verify the signature; one of them must have signed the bundle
	// (several at once for rotation, chosen by the signature's key id). At
	// least one is required: itogate never reads an unsigned archive.
	Keys []Key
	// Scope, when set, must equal the signature's scope claim.
	Scope string
	// Limits; zero means the Default* value.
	MaxBytes         int64
	MaxUnpackedBytes int64
	MaxFiles         int
}

// Verifier checks bundle archives. It is safe for concurrent use.
type Verifier struct {
	vc          *opabundle.VerificationConfig
	maxBytes    int64
	maxUnpacked int64
	maxFiles    int
}

// NewVerifier validates the keys (asymmetric algorithms only, the algorithm
// must fit the key, key ids unique) and returns a Verifier.
func NewVerifier(opts VerifierOptions) (*Verifier, error) {
	if len(opts.Keys) == 0 {
		return nil, errors.New("bundle: at least one verification key is required")
	}
	public := map[string]*keys.Config{}
	for _, k := range opts.Keys {
		if k.ID == "" {
			return nil, errors.New("bundle: a verification key without key id")
		}
		if _, dup := public[k.ID]; dup {
			return nil, fmt.Errorf("bundle: verification key id %q given twice", k.ID)
		}
		// KeySetFromPEM accepts exactly one PKIX public key whose type fits
		// an asymmetric algorithm (no HMAC secrets, no private keys).
		if _, err := verify.KeySetFromPEM(k.ID, k.Algorithm, k.PEM); err != nil {
			return nil, fmt.Errorf("bundle: verification key %q: %w", k.ID, err)
		}
		public[k.ID] = &keys.Config{Key: string(k.PEM), Algorithm: k.Algorithm, Scope: opts.Scope}
	}
	v := &Verifier{
		// An empty key id makes OPA pick the key by the signature's kid.
		vc:          opabundle.NewVerificationConfig(public, "", opts.Scope, nil),
		maxBytes:    opts.MaxBytes,
		maxUnpacked: opts.MaxUnpackedBytes,
		maxFiles:    opts.MaxFiles,
	}
	if v.maxBytes <= 0 {
		v.maxBytes = DefaultMaxBytes
	}
	if v.maxUnpacked <= 0 {
		v.maxUnpacked = DefaultMaxUnpackedBytes
	}
	if v.maxFiles <= 0 {
		v.maxFiles = DefaultMaxFiles
	}
	return v, nil
}

// MaxBytes is the largest archive Verify accepts.
func (v *Verifier) MaxBytes() int64 { return v.maxBytes }

// Digest is "sha256:<hex>" of an archive.
func Digest(raw []byte) string {
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Verify checks an archive (a .tar.gz as `opa build` writes it) and reads it
// with OPA. Errors are *Error.
//
// In order: the size; every tar entry (only regular files and directories,
// names relative, clean and inside the root, no duplicates, only
// .manifest and .signatures.json at the root, *.rego and data.json files
// elsewhere); a .signatures.json must exist and hold exactly one JWT that
// verifies with a configured key (by kid) and whose file list matches the
// archive exactly, hash for hash (OPA's VerifyBundleSignature and
// VerifyBundleFile); OPA's bundle.Reader then reads it, verifying again;
// finally the .manifest must carry a revision (ParseRevision), a signed
// metadata.built_at, roots within "ito", Rego v1, and the bundle must define
// data.ito.admission.decision.
func (v *Verifier) Verify(raw []byte, origin string) (*Bundle, error) {
	if int64(len(raw)) > v.maxBytes {
		return nil, fail(ReasonTooLarge, "archive of %d bytes exceeds %d", len(raw), v.maxBytes)
	}
	files, err := v.unpack(raw)
	if err != nil {
		return nil, err
	}
	sigs, ok := files[signaturesFile]
	if !ok {
		return nil, fail(ReasonUnsigned, "no %s: the bundle is not signed", signaturesFile)
	}
	keyID, err := v.checkSignature(sigs, files)
	if err != nil {
		return nil, err
	}

	loader := opabundle.NewTarballLoaderWithBaseURL(bytes.NewReader(raw), "").WithSizeLimitBytes(v.maxUnpacked)
	b, err := opabundle.NewCustomReader(loader).
		WithRegoVersion(ast.RegoV1).
		WithProcessAnnotations(true).
		WithBundleVerificationConfig(v.vc).
		WithSizeLimitBytes(v.maxUnpacked).
		Read()
	if err != nil {
		return nil, fail(ReasonInvalid, "%v", err)
	}
	if len(b.Signatures.Signatures) == 0 {
		// Unreachable after checkSignature; kept so that no change in OPA's
		// reader can ever let an unsigned bundle through.
		return nil, fail(ReasonUnsigned, "OPA read no signature")
	}
	out, err := checkManifest(&b)
	if err != nil {
		return nil, err
	}
	out.Digest = Digest(raw)
	out.KeyID = keyID
	out.Origin = origin
	out.Size = len(raw)
	return out, nil
}

// unpack reads every tar entry, enforcing the limits and the name rules, and
// returns the files by their name relative to the bundle root.
func (v *Verifier) unpack(raw []byte) (map[string][]byte, error) {
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fail(ReasonArchive, "not gzip: %v", err)
	}
	defer gz.Close()
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fail(ReasonArchive, "not a tar archive: %v", err)
		}
		if n >= v.maxFiles {
			return nil, fail(ReasonTooLarge, "more than %d entries", v.maxFiles)
		}
		name, err := entryName(h.Name)
		if err != nil {
			return nil, err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		case tar.TypeSymlink, tar.TypeLink:
			return nil, fail(ReasonPath, "entry %q is a link", name)
		default:
			return nil, fail(ReasonArchive, "entry %q is not a regular file (type %q)", name, h.Typeflag)
		}
		if err := allowedFile(name); err != nil {
			return nil, err
		}
		if _, dup := files[name]; dup {
			return nil, fail(ReasonArchive, "entry %q appears twice", name)
		}
		if h.Size < 0 || h.Size > v.maxUnpacked-total {
			return nil, fail(ReasonTooLarge, "unpacked size exceeds %d bytes", v.maxUnpacked)
		}
		data, err := io.ReadAll(io.LimitReader(tr, h.Size+1))
		if err != nil {
			return nil, fail(ReasonArchive, "entry %q: %v", name, err)
		}
		if int64(len(data)) != h.Size {
			return nil, fail(ReasonArchive, "entry %q: size does not match its header", name)
		}
		total += h.Size
		files[name] = data
	}
	return files, nil
}

// entryName turns a tar name into a path relative to the bundle root. OPA
// writes "/ito/x.rego"; "./ito/x.rego" and "ito/x.rego" are accepted too.
// Anything that is not a clean, relative, slash-separated path below the
// root ("..", empty or "." elements, backslashes, control characters) is
// refused.
func entryName(raw string) (string, error) {
	name := strings.TrimSuffix(raw, "/") // directories
	if after, ok := strings.CutPrefix(name, "./"); ok {
		name = after
	} else if after, ok := strings.CutPrefix(name, "/"); ok {
		name = after
	}
	if name == "" || !fs.ValidPath(name) || name == "." || strings.ContainsRune(name, '\\') {
		return "", fail(ReasonPath, "entry %q escapes the bundle root or is not a clean path", truncate(raw, 128))
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return "", fail(ReasonPath, "entry name with a control character")
		}
	}
	return name, nil
}

// allowedFile accepts what `opa build` writes for a Rego bundle.
func allowedFile(name string) error {
	base := path.Base(name)
	switch {
	case name == manifestFile || name == signaturesFile:
		return nil
	case base == manifestFile || base == signaturesFile || strings.HasSuffix(base, ".manifest"):
		return fail(ReasonArchive, "%q is only allowed at the bundle root", name)
	case base == "data.json", strings.HasSuffix(base, ".rego"):
		return nil
	default:
		return fail(ReasonArchive, "unexpected file %q (a Rego bundle holds .rego and data.json files)", name)
	}
}

// checkSignature verifies .signatures.json with OPA's own functions: exactly
// one JWT, signed by a configured key (picked by kid, algorithm from the
// configuration), scope as configured, and a file list equal to the
// archive's files with equal hashes. It returns the key id.
func (v *Verifier) checkSignature(raw []byte, files map[string][]byte) (string, error) {
	var sc opabundle.SignaturesConfig
	if err := json.Unmarshal(raw, &sc); err != nil {
		return "", fail(ReasonSignature, "%s: %v", signaturesFile, err)
	}
	if len(sc.Signatures) == 0 {
		return "", fail(ReasonUnsigned, "%s holds no signature", signaturesFile)
	}
	if sc.Plugin != "" && sc.Plugin != "_default" {
		// OPA writes "_default" for its own JWT verifier; other plugins
		// would verify by rules nobody reviewed.
		return "", fail(ReasonSignature, "signature plugin %q is not accepted", truncate(sc.Plugin, 32))
	}
	signed, err := opabundle.VerifyBundleSignature(sc, v.vc)
	if err != nil {
		return "", fail(ReasonSignature, "%v", err)
	}
	for name, data := range files {
		if name == signaturesFile {
			continue
		}
		if err := opabundle.VerifyBundleFile(name, *bytes.NewBuffer(data), signed); err != nil {
			return "", fail(ReasonSignature, "%v", err)
		}
	}
	if len(signed) != 0 {
		missing := make([]string, 0, len(signed))
		for name := range signed {
			missing = append(missing, name)
		}
		return "", fail(ReasonSignature, "signed file(s) %v missing from the archive", missing)
	}
	return signatureKeyID(sc.Signatures[0]), nil
}

// signatureKeyID reads the kid of a verified JWT (or its legacy keyid claim).
func signatureKeyID(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	var hdr struct {
		Kid string `json:"kid"`
	}
	if b, err := base64.RawURLEncoding.DecodeString(parts[0]); err == nil && json.Unmarshal(b, &hdr) == nil && hdr.Kid != "" {
		return hdr.Kid
	}
	var claims struct {
		KeyID string `json:"keyid"`
	}
	if b, err := base64.RawURLEncoding.DecodeString(parts[1]); err == nil && json.Unmarshal(b, &claims) == nil {
		return claims.KeyID
	}
	return ""
}

// checkManifest enforces what itogate requires of a bundle beyond OPA.
func checkManifest(b *opabundle.Bundle) (*Bundle, error) {
	m := b.Manifest
	if b.Type() != opabundle.SnapshotBundleType {
		return nil, fail(ReasonManifest, "delta bundles are not accepted")
	}
	revTime, err := ParseRevision(m.Revision)
	if err != nil {
		return nil, fail(ReasonManifest, "%v", err)
	}
	builtAt, err := parseBuiltAt(m.Metadata)
	if err != nil {
		return nil, fail(ReasonManifest, "%v", err)
	}
	if m.Roots == nil || len(*m.Roots) == 0 {
		return nil, fail(ReasonManifest, "roots are missing (want [%q])", Root)
	}
	for _, r := range *m.Roots {
		if r != Root && !strings.HasPrefix(r, Root+"/") {
			return nil, fail(ReasonManifest, "root %q is outside %q", truncate(r, 64), Root)
		}
	}
	if m.RegoVersion != nil && *m.RegoVersion != 1 {
		return nil, fail(ReasonManifest, "rego_version %d (only Rego v1)", *m.RegoVersion)
	}
	if len(m.FileRegoVersions) != 0 {
		return nil, fail(ReasonManifest, "file_rego_versions are not accepted (only Rego v1)")
	}
	if len(m.WasmResolvers) != 0 || len(b.WasmModules) != 0 || len(b.PlanModules) != 0 {
		return nil, fail(ReasonManifest, "wasm and plan bundles are not accepted")
	}
	if !definesEntrypoint(b) {
		return nil, fail(ReasonManifest, "no rule %s.%s", entrypointPackage, entrypointRule)
	}
	return &Bundle{Parsed: b, Revision: m.Revision, RevisionTime: revTime, BuiltAt: builtAt}, nil
}

func definesEntrypoint(b *opabundle.Bundle) bool {
	for _, mf := range b.Modules {
		if mf.Parsed == nil || mf.Parsed.Package.Path.String() != entrypointPackage {
			continue
		}
		for _, r := range mf.Parsed.Rules {
			if r.Head.Ref().String() == entrypointRule {
				return true
			}
		}
	}
	return false
}
