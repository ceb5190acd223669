package api

import (
	"errors"

	"github.com/oncegate/oncegate/internal/provider"
)

// Refusals more than one handler makes, each worded once.

// InvalidRequest is the 400 for a request body the parser refused: the
// parser's message and parameter when it named them.
func InvalidRequest(err error) *Error {
	var inv *provider.InvalidRequestError
	if errors.As(err, &inv) {
		return &Error{Code: CodeInvalidRequest, Message: inv.Message, Param: inv.Param}
	}
	return Errorf(CodeInvalidRequest, "%v", err)
}

// ModelNotFound is the 404 for a model no alias names.
func ModelNotFound(model string) *Error {
	return &Error{Code: CodeModelNotFound, Param: "model", Message: "the model `" + model + "` does not exist or you do not have access to it"}
}

// StoreUnavailable refuses a request the gateway's store could not
// read or write: nothing was sent, so the client may come back.
func StoreUnavailable(err error) *Error {
	e := Errorf(CodeStoreUnavailable, "the gateway's store could not be reached: %v", err)
	e.RetryAfter = 1
	return e
}
