package a2awire

import (
	"encoding/json"
	"net/url"

	"github.com/channels-dev/channels/taskplane"
)

// AuthenticationInfo is how a push notification authenticates to its receiver. Credentials is
// accepted on input and never emitted: the From* conversions leave it out.
type AuthenticationInfo struct {
	Scheme      string `json:"scheme"`
	Credentials string `json:"credentials,omitempty"`
}

// TaskPushNotificationConfig is the A2A v1 push-notification config (flattened: url, token and
// authentication sit beside id and taskId). Token and Authentication.Credentials are accepted on
// input and never emitted.
type TaskPushNotificationConfig struct {
	Tenant         string              `json:"tenant,omitempty"`
	ID             string              `json:"id,omitempty"`
	TaskID         string              `json:"taskId,omitempty"`
	URL            string              `json:"url"`
	Token          string              `json:"token,omitempty"`
	Authentication *AuthenticationInfo `json:"authentication,omitempty"`
}

// TaskPushConfigRequest is the request of GetTaskPushNotificationConfig and
// DeleteTaskPushNotificationConfig.
type TaskPushConfigRequest struct {
	Tenant string
	TaskID string
	ID     string
}

// ListTaskPushConfigsRequest is the request of ListTaskPushNotificationConfigs. PageSize 0 means
// every config.
type ListTaskPushConfigsRequest struct {
	Tenant    string
	TaskID    string
	PageSize  int
	PageToken string
}

// ListTaskPushConfigsResponse is the answer of ListTaskPushNotificationConfigs. Both members are
// always emitted.
type ListTaskPushConfigsResponse struct {
	Configs       []TaskPushNotificationConfig `json:"configs"`
	NextPageToken string                       `json:"nextPageToken"`
}

// Bounds of a push config's members, beyond the request limits.
const (
	maxPushSecretBytes = 4096
	maxPushSchemeBytes = 64
)

// DecodeTaskPushNotificationConfig decodes a TaskPushNotificationConfig: the params of
// CreateTaskPushNotificationConfig, the body of its REST route, or a send's
// configuration.taskPushNotificationConfig. url is required, and authentication.scheme when
// authentication is given. The v1.0-rc nesting ({"taskId", "pushNotificationConfig": {url, …}})
// is read too.
func DecodeTaskPushNotificationConfig(raw json.RawMessage, path string, lim Limits) (*TaskPushNotificationConfig, *Error) {
	lim = lim.WithDefaults()
	o, err := parseObject(raw, path)
	if err != nil {
		return nil, err
	}
	c := &TaskPushNotificationConfig{}
	if c.Tenant, err = o.str("tenant", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if c.TaskID, err = o.str("taskId", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	inner := o
	if _, ok := o.get("url"); !ok {
		if nested, present, err := o.child("pushNotificationConfig"); err != nil {
			return nil, err
		} else if present {
			inner = nested
		}
	}
	if c.ID, err = inner.str("id", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if c.ID == "" {
		if c.ID, err = o.str("id", lim.MaxIDBytes); err != nil {
			return nil, err
		}
	}
	if c.URL, err = inner.required("url", lim.MaxURLBytes); err != nil {
		return nil, err
	}
	if e := checkURL(c.URL); e != "" {
		return nil, Invalid(inner.field("url"), "%s", e)
	}
	if c.Token, err = inner.str("token", maxPushSecretBytes); err != nil {
		return nil, err
	}
	a, present, err := inner.child("authentication")
	if err != nil {
		return nil, err
	}
	if present {
		c.Authentication = &AuthenticationInfo{}
		if c.Authentication.Scheme, err = a.str("scheme", maxPushSchemeBytes); err != nil {
			return nil, err
		}
		if c.Authentication.Scheme == "" {
			// v0.3 clients send a list of schemes; the first one is the scheme to use.
			if schemes, err := a.strings("schemes", lim.MaxListItems, maxPushSchemeBytes); err != nil {
				return nil, err
			} else if len(schemes) > 0 {
				c.Authentication.Scheme = schemes[0]
			}
		}
		if c.Authentication.Scheme == "" {
			return nil, Invalid(a.field("scheme"), "is required")
		}
		if c.Authentication.Credentials, err = a.str("credentials", maxPushSecretBytes); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// DecodeTaskPushConfigRequest decodes the params of GetTaskPushNotificationConfig and
// DeleteTaskPushNotificationConfig: taskId and id are required.
func DecodeTaskPushConfigRequest(raw json.RawMessage, lim Limits) (*TaskPushConfigRequest, *Error) {
	lim = lim.WithDefaults()
	o, err := parseObject(raw, "")
	if err != nil {
		return nil, err
	}
	req := &TaskPushConfigRequest{}
	if req.Tenant, err = o.str("tenant", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if req.TaskID, err = o.required("taskId", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if req.ID, err = o.str("id", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if req.ID == "" {
		// v0.3 named it pushNotificationConfigId.
		if req.ID, err = o.str("pushNotificationConfigId", lim.MaxIDBytes); err != nil {
			return nil, err
		}
	}
	if req.ID == "" {
		return nil, Invalid("id", "is required")
	}
	return req, nil
}

// DecodeListTaskPushConfigsRequest decodes the params of ListTaskPushNotificationConfigs.
func DecodeListTaskPushConfigsRequest(raw json.RawMessage, lim Limits) (*ListTaskPushConfigsRequest, *Error) {
	lim = lim.WithDefaults()
	o, err := parseObject(raw, "")
	if err != nil {
		return nil, err
	}
	req := &ListTaskPushConfigsRequest{}
	if req.Tenant, err = o.str("tenant", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if req.TaskID, err = o.required("taskId", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	size, err := o.int32("pageSize")
	if err != nil {
		return nil, err
	}
	if size != nil {
		req.PageSize = *size
	}
	if req.PageToken, err = o.str("pageToken", 1024); err != nil {
		return nil, err
	}
	return req, req.validate(lim)
}

func (req *ListTaskPushConfigsRequest) validate(lim Limits) *Error {
	if req.PageSize < 0 || req.PageSize > lim.MaxPageSize {
		return Invalid("pageSize", "must be between 0 and %d", lim.MaxPageSize)
	}
	return nil
}

// ListTaskPushConfigsFromQuery decodes ListTaskPushNotificationConfigs from REST query
// parameters; taskId comes from the path.
func ListTaskPushConfigsFromQuery(taskID string, q url.Values, lim Limits) (*ListTaskPushConfigsRequest, *Error) {
	lim = lim.WithDefaults()
	get := func(name string) string {
		if v := q.Get(name); v != "" {
			return v
		}
		return q.Get(snake(name))
	}
	req := &ListTaskPushConfigsRequest{Tenant: get("tenant"), TaskID: taskID, PageToken: get("pageToken")}
	if err := queryTooLong(lim, "tenant", req.Tenant, "pageToken", req.PageToken); err != nil {
		return nil, err
	}
	size, err := queryInt(get("pageSize"), "pageSize")
	if err != nil {
		return nil, err
	}
	if size != nil {
		req.PageSize = *size
	}
	return req, req.validate(lim)
}

// ToPushConfig converts a decoded config to the domain.
func ToPushConfig(c TaskPushNotificationConfig) taskplane.PushConfig {
	out := taskplane.PushConfig{ID: c.ID, TaskID: c.TaskID, URL: c.URL, Token: c.Token}
	if c.Authentication != nil {
		out.Auth = &taskplane.PushAuth{Scheme: c.Authentication.Scheme, Credentials: c.Authentication.Credentials}
	}
	return out
}

// FromPushConfig converts a domain config to the wire for a read: never its token or
// credentials, whatever c holds.
func FromPushConfig(c taskplane.PushConfig, tenant string) TaskPushNotificationConfig {
	out := TaskPushNotificationConfig{Tenant: tenant, ID: c.ID, TaskID: c.TaskID, URL: c.URL}
	if c.Auth != nil {
		out.Authentication = &AuthenticationInfo{Scheme: c.Auth.Scheme}
	}
	return out
}
