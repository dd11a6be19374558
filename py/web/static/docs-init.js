// Swagger UI for the Codity API, pointed at the document generated from the route list.
// A file rather than an inline script, so the page's Content-Security-Policy can stay
// script-src 'self'.
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "/api/v1/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    persistAuthorization: false,
  });
});
