package strictjson_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/strictjson"
)

type named string

type wire struct {
	Name    named    `json:"name"`
	Flag    bool     `json:"flag,omitempty"`
	N       int64    `json:"n"`
	List    []string `json:"list"`
	Blob    []byte   `json:"blob"`
	Step    *int64   `json:"step,omitempty"`
	Skipped string   `json:"-"`
}

func TestInto(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       wire
		err        string
		base64     bool
	}{
		{name: "every kind", body: `{"name":"a","flag":true,"n":-7,"list":["x","y"],"blob":"+/8="}`,
			want: wire{Name: "a", Flag: true, N: -7, List: []string{"x", "y"}, Blob: []byte{0xfb, 0xff}}},
		{name: "absent members stay zero", body: `{}`, want: wire{}},
		// A pointer is set when its member is present: 0 is not absent.
		{name: "pointer to 0", body: `{"step":0}`, want: wire{Step: new(int64(0))}},
		{name: "pointer to 9", body: `{"step":9}`, want: wire{Step: new(int64(9))}},
		{name: "null is no pointer", body: `{"step":null}`, err: `field "step" must be an integer`},
		{name: "pointer's type", body: `{"step":"0"}`, err: `field "step" must be an integer`},
		{name: "names match exactly", body: `{"Name":"a"}`, err: `unknown field (a name not shown)`},
		{name: "unknown member named", body: `{"other":1}`, err: `unknown field "other"`},
		{name: "a key that may be a secret is not echoed", body: `{"eyJhbGciOiJFUzI1NiJ9":1}`, err: `unknown field (a name not shown)`},
		{name: "json tag - is no member", body: `{"-":"x"}`, err: `unknown field (a name not shown)`},
		{name: "string", body: `{"name":1}`, err: `field "name" must be a string`},
		{name: "null is no string", body: `{"name":null}`, err: `field "name" must be a string`},
		{name: "bool", body: `{"flag":"true"}`, err: `field "flag" must be a boolean`},
		{name: "integer", body: `{"n":1.5}`, err: `field "n" must be an integer`},
		{name: "integer beyond int64", body: `{"n":9223372036854775808}`, err: `field "n" must be an integer`},
		{name: "list too long", body: `{"list":["a","b","c"]}`, err: `field "list" must be an array of at most 2 strings`},
		{name: "list of non-strings", body: `{"list":[1]}`, err: `field "list" must be an array of strings`},
		{name: "blob not a string", body: `{"blob":1}`, err: `field "blob" must be a string`},
		{name: "blob with a line break", body: `{"blob":"+/8=\n"}`, err: "blob must be standard base64 (RFC 4648 §4)", base64: true},
		{name: "blob unpadded", body: `{"blob":"+/8"}`, err: "blob must be standard base64 (RFC 4648 §4)", base64: true},
		{name: "blob URL alphabet", body: `{"blob":"-_8="}`, err: "blob must be standard base64 (RFC 4648 §4)", base64: true},
		// A bad member beside bad base64: the member is reported, whatever
		// the map order (base64 is decoded after every other member).
		{name: "type error before base64", body: `{"blob":"%%%","name":1}`, err: `field "name" must be a string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := strictjson.DecodeObject([]byte(tc.body), 8)
			if err != nil {
				t.Fatal(err)
			}
			for range 20 { // map order must not change the answer
				var got wire
				err = strictjson.Into(obj, &got, 2)
				var b64 *strictjson.Base64Error
				switch {
				case tc.err == "" && err != nil:
					t.Fatalf("error %v", err)
				case tc.err != "" && (err == nil || err.Error() != tc.err):
					t.Fatalf("error %v, want %q", err, tc.err)
				case errors.As(err, &b64) != tc.base64:
					t.Fatalf("error %v: base64 error %v, want %v", err, !tc.base64, tc.base64)
				case tc.err == "" && (got.Name != tc.want.Name || got.Flag != tc.want.Flag || got.N != tc.want.N ||
					!slices.Equal(got.List, tc.want.List) || !slices.Equal(got.Blob, tc.want.Blob) ||
					(got.Step == nil) != (tc.want.Step == nil) || (got.Step != nil && *got.Step != *tc.want.Step)):
					t.Fatalf("got %+v, want %+v", got, tc.want)
				}
			}
		})
	}
	if err := strictjson.Into(map[string]any{}, wire{}, 1); err == nil {
		t.Error("Into accepted a non-pointer")
	}
}
