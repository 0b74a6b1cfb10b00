package a2aservice

import (
	"context"
	"errors"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// PushNotifier is what the service needs of the push-notification deliverer (push.Notifier).
// With Config.Push set the card declares pushNotifications: true, the four push-config
// operations work, and a send's configuration.taskPushNotificationConfig is registered in the
// acceptance; without it they answer PushNotificationNotSupported.
type PushNotifier interface {
	// CheckURL is the SSRF guard's check of a webhook at registration; an error refuses it.
	CheckURL(ctx context.Context, rawURL string) error
	// Registered is told after a config was stored, so its first notification goes out at once.
	Registered(principal, taskID string)
}

// PushSupported refuses push operations when the server offers none (Config.Push is nil) with
// PushNotificationNotSupported. Bindings call it before decoding a push-config request.
func (s *Service) PushSupported() error {
	if s.cfg.Push == nil {
		return s.PushNotConfigured()
	}
	return nil
}

// checkPushURL runs the SSRF guard on a webhook being registered.
func (s *Service) checkPushURL(ctx context.Context, field, raw string) error {
	if err := s.cfg.Push.CheckURL(ctx, raw); err != nil {
		// The error is what the client may learn; its cause (a name's internal addresses, the
		// resolver's errors) is for the operator.
		if cause := errors.Unwrap(err); cause != nil && cause.Error() != err.Error() {
			s.log.InfoContext(ctx, "push webhook refused", "field", field, "err", cause)
		}
		return a2awire.Invalid(field, "%s", err.Error())
	}
	return nil
}

// pushError maps the task plane's push-config errors: a missing config is TaskNotFound (A2A
// v1.0.1 §3.1.8), the bound is invalid params.
func pushError(err error) error {
	switch {
	case errors.Is(err, taskplane.ErrPushConfigNotFound):
		return a2awire.Errorf(a2awire.ErrTaskNotFound, "push notification config not found")
	case errors.Is(err, taskplane.ErrPushConfigLimit):
		return a2awire.Invalid("", "a task holds at most %d push notification configs; delete one first", taskplane.MaxPushConfigs)
	}
	return err
}

// CreatePushConfig registers a push-notification config on a task of the caller (or replaces the
// config with the same id) and returns it without its token or credentials. The task as it is
// now is notified first, then every later status change and artifact update.
func (s *Service) CreatePushConfig(ctx context.Context, call Call, req *a2awire.TaskPushNotificationConfig) (*a2awire.TaskPushNotificationConfig, error) {
	if err := s.PushSupported(); err != nil {
		return nil, err
	}
	if req.TaskID == "" {
		return nil, a2awire.Invalid("taskId", "is required")
	}
	// The task first: a foreign task is TaskNotFound before the URL is even looked at.
	if _, err := s.plane.GetTask(ctx, call.Principal, req.TaskID); err != nil {
		return nil, err
	}
	if err := s.checkPushURL(ctx, "url", req.URL); err != nil {
		return nil, err
	}
	c, err := s.plane.SetPushConfig(ctx, call.Principal, req.TaskID, a2awire.ToPushConfig(*req))
	if err != nil {
		return nil, pushError(err)
	}
	s.cfg.Push.Registered(call.Principal, req.TaskID)
	out := a2awire.FromPushConfig(c, call.Tenant)
	return &out, nil
}

// GetPushConfig returns one config of a task of the caller, without its secrets.
func (s *Service) GetPushConfig(ctx context.Context, call Call, req *a2awire.TaskPushConfigRequest) (*a2awire.TaskPushNotificationConfig, error) {
	if err := s.PushSupported(); err != nil {
		return nil, err
	}
	c, err := s.plane.GetPushConfig(ctx, call.Principal, req.TaskID, req.ID)
	if err != nil {
		return nil, pushError(err)
	}
	out := a2awire.FromPushConfig(c, call.Tenant)
	return &out, nil
}

// ListPushConfigs lists the configs of a task of the caller, without their secrets.
func (s *Service) ListPushConfigs(ctx context.Context, call Call, req *a2awire.ListTaskPushConfigsRequest) (*a2awire.ListTaskPushConfigsResponse, error) {
	if err := s.PushSupported(); err != nil {
		return nil, err
	}
	page, err := s.plane.ListPushConfigs(ctx, call.Principal, req.TaskID, req.PageSize, req.PageToken)
	if err != nil {
		if errors.Is(err, taskplane.ErrInvalid) {
			return nil, a2awire.Invalid("pageToken", "is not a token this server issued")
		}
		return nil, pushError(err)
	}
	out := &a2awire.ListTaskPushConfigsResponse{Configs: make([]a2awire.TaskPushNotificationConfig, 0, len(page.Configs)),
		NextPageToken: page.NextPageToken}
	for _, c := range page.Configs {
		out.Configs = append(out.Configs, a2awire.FromPushConfig(c, call.Tenant))
	}
	return out, nil
}

// DeletePushConfig removes a config of a task of the caller; a config that does not exist is
// already deleted.
func (s *Service) DeletePushConfig(ctx context.Context, call Call, req *a2awire.TaskPushConfigRequest) error {
	if err := s.PushSupported(); err != nil {
		return err
	}
	return pushError(s.plane.DeletePushConfig(ctx, call.Principal, req.TaskID, req.ID))
}
