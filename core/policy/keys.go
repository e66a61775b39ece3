package policy

import (
	"errors"
	"fmt"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/keyfunc"
)

// StandardKeyConfig says how to build the standard key functions a
// configuration names. A zero field leaves its names out, so a document
// that uses them gets an "unknown key function" problem.
type StandardKeyConfig struct {
	// IP configures "ip" (keyfunc.IP). The zero value keys by the peer
	// address and reads no header; name your proxies to read theirs.
	IP keyfunc.IPConfig
	// APIKey configures "apikey" (keyfunc.APIKey); included when its
	// Hasher is set.
	APIKey keyfunc.APIKeyConfig
	// TenantValue, OperatorValue and SubscriberValue are the
	// request-scoped value keys under which the application's
	// authentication middleware stores the tenant, the operator and the
	// portal subscriber (see keyfunc.Value). TenantValue gives "tenant";
	// with OperatorValue also "operator" and "tenant+operator"
	// (keyfunc.Composite); SubscriberValue gives "subscriber".
	TenantValue, OperatorValue, SubscriberValue any
}

// StandardKeys builds the named key functions of cfg for LoadConfig.Keys:
// "ip", "apikey", "tenant", "operator", "tenant+operator", "subscriber",
// and "global" (one key for every request). Add the application's own
// names to the map it returns.
func StandardKeys(cfg StandardKeyConfig) (map[string]core.KeyFunc, error) {
	keys := map[string]core.KeyFunc{"global": keyfunc.Global()}
	var errs []error
	ip, err := keyfunc.IP(cfg.IP)
	if err != nil {
		errs = append(errs, fmt.Errorf("ip: %w", err))
	} else {
		keys["ip"] = ip
	}
	if cfg.APIKey.Hasher != nil {
		k, err := keyfunc.APIKey(cfg.APIKey)
		if err != nil {
			errs = append(errs, fmt.Errorf("apikey: %w", err))
		} else {
			keys["apikey"] = k
		}
	}
	if cfg.TenantValue != nil {
		keys["tenant"] = keyfunc.Tenant(cfg.TenantValue)
	}
	if cfg.OperatorValue != nil {
		keys["operator"] = keyfunc.Operator(cfg.OperatorValue)
		if cfg.TenantValue != nil {
			keys["tenant+operator"] = keyfunc.Composite(keys["tenant"], keys["operator"])
		}
	}
	if cfg.SubscriberValue != nil {
		keys["subscriber"] = keyfunc.Subscriber(cfg.SubscriberValue)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("policy: standard keys: %w", err)
	}
	return keys, nil
}
