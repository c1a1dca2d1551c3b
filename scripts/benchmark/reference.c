/* The benchmark's reference: a libmicrohttpd server answering every request with the same
 * JSON body (1 KiB, or BODY-BYTES; 64 KiB for paths under /64k/), in libmicrohttpd's fastest
 * mode here (epoll, internal pool of 2 threads, response queued on the second handler call).
 * Built and run by scripts/bench, which also uses it as the origin behind Larder and nginx, and
 * by scripts/bench-scale, which asks for tags: then a path ending in a digit d gets
 * `Surrogate-Key: t<d>`, so each tag is on a tenth of the URLs.
 *   reference PORT [BODY-BYTES [tags]] */
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *body;
static size_t body_size = 1024;
static char large[64 * 1024];
static int tagged;
static const char *tags[10] = {"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"};

static enum MHD_Result handle(void *cls, struct MHD_Connection *connection, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls) {
    static int marker;
    (void)cls; (void)method; (void)version; (void)upload_data;
    if (*con_cls == NULL) { *con_cls = &marker; return MHD_YES; }
    if (*upload_data_size != 0) { *upload_data_size = 0; return MHD_YES; }
    int is_large = strncmp(url, "/64k/", 5) == 0;
    struct MHD_Response *response = is_large
        ? MHD_create_response_from_buffer(sizeof large, large, MHD_RESPMEM_PERSISTENT)
        : MHD_create_response_from_buffer(body_size, body, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(response, "Content-Type", "application/json");
    /* Cacheable for a day, so caches in front of it (Larder's proxy, nginx) keep it. */
    MHD_add_response_header(response, "Cache-Control", "max-age=86400");
    size_t length = strlen(url);
    if (tagged && length > 0 && url[length - 1] >= '0' && url[length - 1] <= '9')
        MHD_add_response_header(response, "Surrogate-Key", tags[url[length - 1] - '0']);
    enum MHD_Result result = MHD_queue_response(connection, 200, response);
    MHD_destroy_response(response);
    return result;
}

int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 18100;
    if (argc > 2 && atol(argv[2]) >= 2) body_size = (size_t)atol(argv[2]);
    tagged = argc > 3 && strcmp(argv[3], "tags") == 0;
    /* Block the stop signals before MHD starts its threads, so only sigwait below sees them. */
    sigset_t set;
    sigemptyset(&set); sigaddset(&set, SIGTERM); sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    body = malloc(body_size);
    memset(body, 'x', body_size);
    body[0] = '"'; body[body_size - 1] = '"';
    memset(large, 'y', sizeof large);
    large[0] = '"'; large[sizeof large - 1] = '"';
    struct MHD_Daemon *daemon = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)port, NULL, NULL, handle, NULL,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)2, MHD_OPTION_CONNECTION_LIMIT, (unsigned int)4096,
        MHD_OPTION_END);
    if (daemon == NULL) { fprintf(stderr, "cannot start on port %d\n", port); return 1; }
    int signal_number;
    sigwait(&set, &signal_number);
    MHD_stop_daemon(daemon);
    return 0;
}
