/*
 * tfdist: keep a local task's TensorFlow port on loopback.
 *
 * TensorFlow's gRPC server binds every interface (0.0.0.0 / [::]) whatever TF_CONFIG says,
 * and it has no authentication. Loaded with LD_PRELOAD, this library interposes bind():
 * a wildcard bind of a port listed in TFDIST_LOOPBACK_PORTS (comma-separated, read once at
 * load) becomes a loopback bind. IPv4 0.0.0.0 becomes 127.0.0.1; IPv6 [::] becomes
 * ::ffff:127.0.0.1 (a dual-stack socket bound there still accepts IPv4 clients of
 * 127.0.0.1, which is what TF_CONFIG names), or [::1] on an IPv6-only socket.
 * Every other bind (other ports, other addresses, other families) is passed on unchanged.
 *
 * It also gives the task PR_SET_PDEATHSIG=SIGKILL (die with tfdist), which otherwise costs an
 * exec of util-linux's setpriv per task (see procs.py): tfdist puts its own pid in
 * TFDIST_PARENT_PID. Only the task process itself acts on it: it is a session leader (tfdist
 * starts each task in its own session) whose parent is that pid. The variable is removed at
 * once, so the task's own children, which inherit LD_PRELOAD, keep the kernel's default (no
 * parent-death signal), as with setpriv. If tfdist died before prctl() took effect, the task
 * has been re-parented already and kills itself: the race setpriv leaves open is closed.
 * The death signal survives an exec (a shell script's `exec python`), except of a setuid or
 * file-capability binary, which clears it with or without this library.
 *
 * Built by tfdist on first use with the system C compiler (see netguard.py).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_PORTS 64

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

static bind_fn real_bind;
static unsigned short ports[MAX_PORTS];
static int nports;

static bind_fn next_bind(void)
{
    bind_fn fn = __atomic_load_n(&real_bind, __ATOMIC_ACQUIRE);
    if (!fn) {
        fn = (bind_fn)dlsym(RTLD_NEXT, "bind");
        __atomic_store_n(&real_bind, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

__attribute__((constructor)) static void load_ports(void)
{
    const char *s = getenv("TFDIST_LOOPBACK_PORTS");
    while (s && *s && nports < MAX_PORTS) {
        char *end;
        unsigned long port = strtoul(s, &end, 10);
        if (end == s)
            break;
        if (port > 0 && port < 65536)
            ports[nports++] = (unsigned short)port;
        if (*end != ',')
            break;
        s = end + 1;
    }
    next_bind();
}

__attribute__((constructor)) static void die_with_parent(void)
{
    const char *s = getenv("TFDIST_PARENT_PID");
    if (!s)
        return;
    char *end;
    long parent = strtol(s, &end, 10);
    unsetenv("TFDIST_PARENT_PID"); /* the task's children must not act on it */
    if (end == s || *end || parent <= 1 || getsid(0) != getpid())
        return; /* not the task process itself: a descendant that copied the variable */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != (pid_t)parent)
        raise(SIGKILL); /* tfdist died before the signal was armed */
}

static int listed(unsigned short port)
{
    for (int i = 0; i < nports; i++)
        if (ports[i] == port)
            return 1;
    return 0;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    bind_fn fn = next_bind();
    if (!fn) {
        errno = ENOSYS;
        return -1;
    }
    if (addr && addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        struct sockaddr_in in4;
        memcpy(&in4, addr, sizeof in4);
        if (in4.sin_addr.s_addr == htonl(INADDR_ANY) && listed(ntohs(in4.sin_port))) {
            in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            return fn(fd, (const struct sockaddr *)&in4, sizeof in4);
        }
    } else if (addr && addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        memcpy(&in6, addr, sizeof in6);
        if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr) && listed(ntohs(in6.sin6_port))) {
            int v6only = 0;
            socklen_t size = sizeof v6only;
            if (getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &size) == 0 && v6only) {
                in6.sin6_addr = in6addr_loopback;
            } else {
                static const unsigned char mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0,
                                                         0, 0, 0xff, 0xff, 127, 0, 0, 1};
                memcpy(&in6.sin6_addr, mapped, sizeof mapped);
            }
            return fn(fd, (const struct sockaddr *)&in6, sizeof in6);
        }
    }
    return fn(fd, addr, len);
}
