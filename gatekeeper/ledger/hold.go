package ledger

import (
	"fmt"
	"time"
)

// The restore hold (README: "The ledger: check, migrations, backup"). A
// ledger restored from a backup or a dump lacks what happened after it: a
// confirmation it shows available may have been consumed since, and one
// deposited and consumed since is missing, so its depositor could deposit
// it again. Until every such confirmation has expired, the store refuses
// every deposit and commit with an error wrapping ErrUnavailable (the
// service answers 503, /readyz is not ready) and answers reads as usual.
// Both stores compute the hold's end with HoldEnd and refuse with Held;
// bbolt keeps it in the file's meta bucket, PostgreSQL in the schema's
// restore_hold row.

// HoldEnd is the end of the hold a restore at now writes: the later of
// now + maxLifetime (the longest exp − iat of a confirmation the issuer
// mints) and latestExpiry (the latest expiry of the confirmations the
// restored ledger shows available; zero when none), plus leeway (the
// longest clock leeway a verifier allows), rounded up to the next whole
// second, in UTC; never earlier than prev, the hold the restored ledger
// already carried (zero: none).
func HoldEnd(now time.Time, maxLifetime, leeway time.Duration, latestExpiry, prev time.Time) time.Time {
	end := now.Add(maxLifetime)
	if latestExpiry.After(end) {
		end = latestExpiry
	}
	end = end.Add(leeway).Truncate(time.Second).Add(time.Second)
	if prev.After(end) {
		end = prev // a backup of a held ledger keeps its hold
	}
	return end.UTC()
}

// Held is the refusal of a deposit or commit at now while a hold until
// until lasts, a *HoldError; nil when there is none (until zero) or it has
// passed. The caller wraps it with ErrUnavailable and the operation.
func Held(until, now time.Time) error {
	if until.IsZero() || !now.Before(until) {
		return nil
	}
	return &HoldError{Until: until.UTC()}
}

// HoldError is Held's refusal: nothing was written, and the same deposit or
// commit is refused until Until (UTC). Unlike another ErrUnavailable from
// Commit, the outcome is known: find it with errors.As.
type HoldError struct {
	Until time.Time
}

func (e *HoldError) Error() string {
	return fmt.Sprintf("restored from a backup: deposits and admissions are held until %s, "+
		"when every confirmation that may have been consumed after the backup has expired", e.Until.Format(time.RFC3339))
}
