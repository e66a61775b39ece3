package core

import (
	"context"
	"errors"
)

// ErrorKind sorts the errors an engine reports to [Observer.ObserveError],
// so an observer can count, log or alert on them without inspecting the
// error. The kinds for which [ErrorKind.IsStore] is true concern the store
// and are reported without a budget; the others concern one budget.
type ErrorKind uint8

const (
	// KindStoreError: a store call (take, refund, or the fallback store)
	// failed.
	KindStoreError ErrorKind = iota
	// KindStoreTimeout: a store call ran out of time.
	KindStoreTimeout
	// KindStoreCanceled: a store call was abandoned because the request's
	// context was canceled (typically the client went away).
	KindStoreCanceled
	// KindBreakerOpen: the circuit breaker skipped the store. Reported once
	// per request while the breaker is open; the error is ErrBreakerOpen.
	KindBreakerOpen
	// KindStoreMisconfigured: a store call failed because the store is set
	// up wrongly (an error wrapping ErrMisconfigured), e.g. a single-node
	// Redis client on a Redis Cluster node answered MOVED. No retry fixes
	// it: every decision that reaches the store fails until the
	// configuration changes.
	KindStoreMisconfigured
	// KindMissingKey: a budget's key function found no key (an error
	// wrapping ErrNoKey). What follows is the budget's MissingKey setting.
	KindMissingKey
	// KindBudgetError: any other error concerning one budget: a key
	// function's other errors, a failing quota resolver, a failing or
	// excessive cost.
	KindBudgetError

	// NumErrorKinds is the number of error kinds, for arrays indexed by
	// ErrorKind.
	NumErrorKinds = int(KindBudgetError) + 1
	// NumStoreErrorKinds is the number of kinds for which IsStore is true:
	// they are the kinds below it.
	NumStoreErrorKinds = int(KindStoreMisconfigured) + 1
)

var errorKindNames = [NumErrorKinds]string{
	"store_error", "store_timeout", "store_canceled", "breaker_open", "store_misconfigured", "no_key", "budget_error",
}

// String returns the kind's name, e.g. "store_timeout".
func (k ErrorKind) String() string {
	if int(k) < NumErrorKinds {
		return errorKindNames[k]
	}
	return "unknown"
}

// IsStore reports whether k concerns the store rather than one budget.
func (k ErrorKind) IsStore() bool { return int(k) < NumStoreErrorKinds }

// ClassifyStoreError returns the kind of a store error: the kind the engine
// reports for it, and the one to use for a failed store call seen
// elsewhere (a [Decision]'s Err after its budgets failed open). It never
// returns a budget kind.
func ClassifyStoreError(err error) ErrorKind {
	switch {
	case errors.Is(err, ErrMisconfigured):
		return KindStoreMisconfigured
	case errors.Is(err, ErrBreakerOpen):
		return KindBreakerOpen
	case errors.Is(err, context.DeadlineExceeded):
		return KindStoreTimeout
	case errors.Is(err, context.Canceled):
		return KindStoreCanceled
	}
	return KindStoreError
}
