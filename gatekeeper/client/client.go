// Package client is the workload creator's side of POST /v1/admissions: it
// sends exactly the manifest bytes it hashed, with bounded timeouts, and after
// an ambiguous transport failure asks for the status of its idempotency key
// before it retries, so a lost response never leads to a second run. It also
// reads a run's status (GET /v1/runs) and posts the authorities' requests:
// deposits and revocations.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// MaxResponseBytes bounds a response body read by the client (1 MiB).
const MaxResponseBytes = 1 << 20

// Options configure a Client.
type Options struct {
	// BaseURL is the itogate root, e.g. "http://127.0.0.1:8443".
	BaseURL string
	// Bearer is the token sent as "Authorization: Bearer" (none when
	// empty: the eval authority's post carries its report instead).
	Bearer string
	// ConnectTimeout bounds dialing (default 3s); Timeout bounds each whole
	// request (default 15s).
	ConnectTimeout time.Duration
	Timeout        time.Duration
	// Attempts is the number of POSTs made at most (default 3).
	Attempts int
}

// Client talks to one itogate.
type Client struct {
	opts Options
	http *http.Client
}

// New returns a Client.
func New(opts Options) (*Client, error) {
	u, err := url.Parse(opts.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, errors.New("client: server URL must be http(s)://host[:port] without credentials")
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 3 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 15 * time.Second
	}
	if opts.Attempts <= 0 {
		opts.Attempts = 3
	}
	tr := &http.Transport{
		Proxy:                 nil, // never route a gate decision through an ambient proxy
		DialContext:           (&net.Dialer{Timeout: opts.ConnectTimeout}).DialContext,
		TLSHandshakeTimeout:   opts.ConnectTimeout,
		ResponseHeaderTimeout: opts.Timeout,
		MaxIdleConns:          2,
	}
	return &Client{opts: opts, http: &http.Client{Transport: tr, Timeout: opts.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}, nil
}

// Response is one answer: the HTTP status and the envelope bytes unchanged.
type Response struct {
	Status int
	Body   []byte
	// Recovered is set when the answer came from a status lookup after an
	// ambiguous failure rather than from the POST itself.
	Recovered bool
}

// Admit posts the admission. On a transport error (the server may or may not
// have committed) it looks the key up: a stored admission is the answer; a
// 404 means nothing was admitted and the POST is retried, up to Attempts.
func (c *Client) Admit(ctx context.Context, req api.AdmissionRequest) (Response, error) {
	// encoding/json writes the manifest bytes as standard base64, the wire
	// form (api.AdmissionRequest).
	payload, err := json.Marshal(req)
	if err != nil {
		return Response{}, err
	}
	var lastErr error
	for attempt := 0; attempt < c.opts.Attempts; attempt++ {
		if attempt > 0 {
			st, err := c.Status(ctx, req.IdempotencyKey)
			if err == nil && st.Status == http.StatusOK {
				st.Recovered = true
				return st, nil
			}
			if err == nil && st.Status != http.StatusNotFound {
				return st, nil // the server answered; don't guess
			}
			if err != nil {
				lastErr = err
				if !sleep(ctx, backoff(attempt)) {
					return Response{}, ctx.Err()
				}
				continue
			}
		}
		resp, err := c.do(ctx, http.MethodPost, "/v1/admissions", payload)
		if err == nil {
			return resp, nil
		}
		lastErr = err
		if !sleep(ctx, backoff(attempt)) {
			return Response{}, ctx.Err()
		}
	}
	return Response{}, fmt.Errorf("client: no definite answer after %d attempts: %w", c.opts.Attempts, lastErr)
}

// Status asks GET /v1/admissions/{key}.
func (c *Client) Status(ctx context.Context, key string) (Response, error) {
	return c.do(ctx, http.MethodGet, "/v1/admissions/"+url.PathEscape(key), nil)
}

// Run asks GET /v1/runs/{run_id}: the run's status (the caller's account's
// runs only).
func (c *Client) Run(ctx context.Context, runID string) (Response, error) {
	return c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(runID), nil)
}

// Runs asks GET /v1/runs with query (booking_id, state, after, limit).
func (c *Client) Runs(ctx context.Context, query url.Values) (Response, error) {
	path := "/v1/runs"
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	return c.do(ctx, http.MethodGet, path, nil)
}

// Revoke posts a revocation of an entitlement, a booking or a caller key
// (POST /v1/revocations; the bearer is the revoker identity's token). It is
// sent once: a revocation is idempotent, so after a transport failure the
// caller sends it again.
func (c *Client) Revoke(ctx context.Context, req api.RevocationRequest) (Response, error) {
	payload, err := json.Marshal(req)
	if err != nil {
		return Response{}, err
	}
	return c.do(ctx, http.MethodPost, "/v1/revocations", payload)
}

// RevokeConfirmation posts a revocation of a confirmation by ref or jti
// (POST /v1/confirmations/revocations; the bearer is the confirmation
// authority's depositor token). Sent once, as Revoke.
func (c *Client) RevokeConfirmation(ctx context.Context, req api.ConfirmationRevocationRequest) (Response, error) {
	payload, err := json.Marshal(req)
	if err != nil {
		return Response{}, err
	}
	return c.do(ctx, http.MethodPost, "/v1/confirmations/revocations", payload)
}

// RenewTicket asks POST /v1/runs/{run_id}/ticket: a fresh ticket of the
// caller's run while it may run (the bearer is a caller token).
func (c *Client) RenewTicket(ctx context.Context, runID string) (Response, error) {
	return c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/ticket", []byte("{}"))
}

// CheckTicket asks POST /v1/tickets/verify: is the ticket's run live, and
// with jobID, bind the run to that one job (the bearer is a scheduler
// token).
func (c *Client) CheckTicket(ctx context.Context, ticket, jobID string) (Response, error) {
	payload, err := json.Marshal(api.TicketCheckRequest{Ticket: ticket, JobID: jobID})
	if err != nil {
		return Response{}, err
	}
	return c.do(ctx, http.MethodPost, "/v1/tickets/verify", payload)
}

// PostEvalReport posts the eval authority's report for runID with the
// run's manifest bytes (POST /v1/runs/{run_id}/eval-reports). The report is
// the post's credential: a client for it has no Bearer. Sent once, as
// Revoke: the same report again gets the same answer.
func (c *Client) PostEvalReport(ctx context.Context, runID, report string, manifest []byte) (Response, error) {
	payload, err := json.Marshal(api.EvalReportRequest{EvalReport: report, Manifest: manifest})
	if err != nil {
		return Response{}, err
	}
	return c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/eval-reports", payload)
}

// Deposit posts a confirmation token (confirmation authority only).
func (c *Client) Deposit(ctx context.Context, token string) (Response, error) {
	payload, _ := json.Marshal(map[string]string{"confirmation_token": token})
	return c.do(ctx, http.MethodPost, "/v1/confirmations", payload)
}

// DepositRef deposits token and returns its confirmation_ref. Anything but
// 201 with a ref is an error carrying the status and the envelope (which
// never holds token bytes).
func (c *Client) DepositRef(ctx context.Context, token string) (string, error) {
	resp, err := c.Deposit(ctx, token)
	if err != nil {
		return "", err
	}
	var env api.Envelope[api.Deposit]
	if err := json.Unmarshal(resp.Body, &env); err != nil || resp.Status != http.StatusCreated || env.Data.ConfirmationRef == "" {
		return "", fmt.Errorf("client: deposit: HTTP %d: %s", resp.Status, bytes.TrimSpace(resp.Body))
	}
	return env.Data.ConfirmationRef, nil
}

func (c *Client) do(ctx context.Context, method, path string, payload []byte) (Response, error) {
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.opts.BaseURL, "/")+path, body)
	if err != nil {
		return Response{}, err
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.opts.Bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.Bearer)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Response{}, fmt.Errorf("client: %s %s: %w", method, path, stripURL(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return Response{}, fmt.Errorf("client: reading response: %w", err)
	}
	if len(data) > MaxResponseBytes {
		return Response{}, errors.New("client: response larger than 1 MiB")
	}
	return Response{Status: resp.StatusCode, Body: data}, nil
}

// stripURL keeps errors short; the URL carries no secret but the bearer is
// never part of an error in any case.
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func backoff(attempt int) time.Duration {
	return time.Duration(200*(1<<attempt)) * time.Millisecond
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
