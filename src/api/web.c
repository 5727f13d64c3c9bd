/* src/api/web.c - the dashboard's static files, embedded into kilnd at build
 * time from src/api/web/ (cmake/embed.cmake).
 *
 *   GET /           index.html (the single page; its routes are #/jobs, ...)
 *   GET /ui/FILE    app.js, style.css, ...
 *
 * The files hold no data: they are served without auth, and the page calls
 * the JSON API with the token the user types into its login form (kept in
 * the tab's sessionStorage). A Content-Security-Policy of 'self' only keeps
 * the page from loading or sending anything elsewhere, and from running
 * inline script (log lines are user data). */
#include <microhttpd.h>
#include <stdbool.h>
#include <string.h>

#include "api/api_int.h"

struct kiln__embedded {
    const char *name;
    const char *data;
    size_t len;
};
extern const struct kiln__embedded kiln__web_files[];

static const struct kiln__embedded *find(const char *name)
{
    for (const struct kiln__embedded *f = kiln__web_files; f->name; f++)
        if (strcmp(f->name, name) == 0) return f;
    return NULL;
}

static const char *content_type(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot) return "application/octet-stream";
    if (strcmp(dot, ".html") == 0) return "text/html; charset=utf-8";
    if (strcmp(dot, ".js") == 0) return "text/javascript; charset=utf-8";
    if (strcmp(dot, ".css") == 0) return "text/css; charset=utf-8";
    if (strcmp(dot, ".svg") == 0) return "image/svg+xml";
    return "application/octet-stream";
}

bool kiln__api_is_web(const char *url)
{
    return strcmp(url, "/") == 0 || strncmp(url, "/ui/", 4) == 0;
}

enum MHD_Result kiln__api_web(struct MHD_Connection *c, const char *method, const char *url)
{
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return send_error(c, 405, NULL, "use GET for the dashboard's files");
    const char *name = strcmp(url, "/") == 0 ? "index.html" : url + 4;
    /* names are looked up in the table, never opened: no path to escape */
    const struct kiln__embedded *f = find(name);
    if (!f) return send_error(c, 404, NULL, "no such file: %.100s", url);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(f->len, (void *)f->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", content_type(f->name));
    /* small files, and a new kilnd may bring new ones: revalidate each load */
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
    return kiln__api_queue(c, 200, r);
}
