package server_test

import (
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestMetricLabelsAreClosed: a client chooses the method and the path, so
// neither may become a label value. Invented methods (an 8 KiB one among
// them) and invented paths, with or without authentication, add no series:
// itogate_http_requests_total keeps the labels the server defines.
func TestMetricLabelsAreClosed(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	long := strings.Repeat("X", 8<<10)
	methods := []string{"INVENTEDMETHOD", "PROPFIND", "get", long}
	for i := range 21 {
		methods = append(methods, "M"+strings.Repeat("Q", i))
	}
	for _, m := range methods {
		for _, path := range []string{"/v1/admissions", "/v1/admissions/k-1", "/no/such/" + strings.Repeat("p", 300)} {
			req, err := http.NewRequest(m, h.srv.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatalf("%.20s %s: %v", m, path, err)
			}
			resp.Body.Close()
		}
	}
	metrics := h.metricsText(t)
	series := regexp.MustCompile(`(?m)^itogate_http_requests_total\{([^}]*)\}`).FindAllStringSubmatch(metrics, -1)
	methodRe := regexp.MustCompile(`method="([^"]*)"`)
	routeRe := regexp.MustCompile(`route="([^"]*)"`)
	seen := map[string]bool{}
	for _, s := range series {
		method := methodRe.FindStringSubmatch(s[1])[1]
		route := routeRe.FindStringSubmatch(s[1])[1]
		seen[method] = true
		switch method {
		case "GET", "POST", "other":
		default:
			t.Errorf("method label %.40q in %s", method, s[0])
		}
		if strings.Contains(route, "no/such") || strings.Contains(route, "k-1") {
			t.Errorf("route label from the request path: %s", s[0])
		}
	}
	if !seen["other"] {
		t.Fatalf("no method=\"other\" series:\n%s", grepMetric(metrics, "itogate_http_requests_total"))
	}
	if len(series) > 12 {
		t.Fatalf("%d request series after %d invented methods:\n%s", len(series), len(methods), grepMetric(metrics, "itogate_http_requests_total"))
	}
	if strings.Contains(metrics, "XXXXXXXX") || strings.Contains(metrics, "INVENTED") || strings.Contains(metrics, "pppppppp") {
		t.Fatal("a client-chosen method or path reached /metrics")
	}
}

func grepMetric(text, name string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, name) {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
