package mock_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/azure"
	oopt "github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/mock"
)

// TestEntraIDWithTheAzureSDKs checks the Entra ID fake and the Azure
// OpenAI fake's bearer tokens with the official SDKs alone: azidentity
// obtains a token from the fake (over TLS, instance discovery off as for
// any authority Microsoft does not know) and openai-go's azure option
// sends it. A wrong secret is refused in Entra's shape; a token the fake
// let expire is refused in Azure's.
func TestEntraIDWithTheAzureSDKs(t *testing.T) {
	m := mock.New(mock.Config{})
	srv := httptest.NewTLSServer(m)
	t.Cleanup(func() { m.Close(); srv.Close() })
	opts := azcore.ClientOptions{Cloud: cloud.Configuration{ActiveDirectoryAuthorityHost: srv.URL}, Transport: mock.OnlyTo(srv.Client(), srv.URL)}
	cred, err := azidentity.NewClientSecretCredential(mock.DefaultEntraTenant, mock.DefaultEntraClient, mock.DefaultEntraSecret,
		&azidentity.ClientSecretCredentialOptions{ClientOptions: opts, DisableInstanceDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	c := openai.NewClient(azure.WithEndpoint(srv.URL, "2024-10-21"), azure.WithTokenCredential(cred),
		oopt.WithHTTPClient(srv.Client()), oopt.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "gpt-4o-deploy", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}}
	for range 2 {
		res, err := c.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if res.Choices[0].Message.Content == "" {
			t.Fatal("no answer")
		}
	}
	if n := m.EntraTokensIssued(); n != 1 {
		t.Fatalf("%d tokens issued, want 1 (the SDK caches it)", n)
	}

	m.ExpireEntraTokens()
	_, err = c.Chat.Completions.New(ctx, params)
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusUnauthorized {
		t.Fatalf("expired token: %v", err)
	}

	bad, err := azidentity.NewClientSecretCredential(mock.DefaultEntraTenant, mock.DefaultEntraClient, "not-the-secret",
		&azidentity.ClientSecretCredentialOptions{ClientOptions: opts, DisableInstanceDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.GetToken(ctx, policyScope())
	var afe *azidentity.AuthenticationFailedError
	if !errors.As(err, &afe) || afe.RawResponse == nil || afe.RawResponse.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong secret: %v", err)
	}
}

func policyScope() policy.TokenRequestOptions {
	return policy.TokenRequestOptions{Scopes: []string{"https://cognitiveservices.azure.com/.default"}}
}
