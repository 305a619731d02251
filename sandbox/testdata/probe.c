/*
 * probe: tries one escape from inside a sluice sandbox and prints
 * "ESCAPED:<name>" only if it worked; otherwise "blocked:<name>:<errno>".
 * Tests assert that no ESCAPED marker ever appears. Probes of what must
 * keep working print "ok:<name>", or "failed:<name>:<errno>".
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/netlink.h>
#include <linux/perf_event.h>
#include <linux/rtnetlink.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <termios.h>
#include <unistd.h>

extern char **environ;

static int report(const char *name, long rc) {
	if (rc >= 0)
		printf("ESCAPED:%s rc=%ld\n", name, rc);
	else
		printf("blocked:%s:%d:%s\n", name, errno, strerror(errno));
	fflush(stdout);
	return 0;
}

/* ok reports a call that must keep working: "ok:<name>", else "failed:<name>:<errno>:". */
static int ok(const char *name, long rc) {
	if (rc >= 0)
		printf("ok:%s\n", name);
	else
		printf("failed:%s:%d:%s\n", name, errno, strerror(errno));
	fflush(stdout);
	return 0;
}

/*
 * sweep prints "<kind>:0x<value>:ok" or "<kind>:0x<value>:<errno>" for
 * socket(2) or socketpair(2) over every domain (arg "socket", "socketpair")
 * or socket(AF_NETLINK) over every protocol (arg "netlink"), including
 * values with garbage in the upper 32 bits, which the kernel drops but a
 * seccomp filter sees. The test decides which results are allowed.
 */
static int sweep(const char *kind) {
	static const unsigned long high[] = {
		1UL << 32, (1UL << 32) | AF_UNIX, (1UL << 32) | AF_INET, (1UL << 32) | AF_INET6,
		(1UL << 32) | AF_NETLINK, (1UL << 32) | AF_VSOCK, 0xffffffffUL, 0xffffffff00000001UL,
		0x8000000000000002UL, ~0UL,
	};
	unsigned long vals[64 + sizeof high / sizeof high[0]];
	int n = 0;
	for (unsigned long v = 0; v < 64; v++) vals[n++] = v;
	for (unsigned i = 0; i < sizeof high / sizeof high[0]; i++) vals[n++] = high[i];
	for (int i = 0; i < n; i++) {
		int sv[2];
		long rc;
		errno = 0;
		if (!strcmp(kind, "socket"))
			rc = syscall(SYS_socket, vals[i], SOCK_DGRAM, 0);
		else if (!strcmp(kind, "socketpair"))
			rc = syscall(SYS_socketpair, vals[i], SOCK_DGRAM, 0, sv);
		else if (!strcmp(kind, "netlink"))
			rc = syscall(SYS_socket, AF_NETLINK, SOCK_DGRAM, vals[i]);
		else {
			fprintf(stderr, "sweep: unknown kind %s\n", kind);
			return 2;
		}
		if (rc >= 0) {
			printf("%s:0x%lx:ok\n", kind, vals[i]);
			if (!strcmp(kind, "socketpair")) { close(sv[0]); close(sv[1]); } else close(rc);
		} else
			printf("%s:0x%lx:%d\n", kind, vals[i], errno);
	}
	fflush(stdout);
	return 0;
}

/* route_dump asks NETLINK_ROUTE for the links, as glibc's getaddrinfo asks for the addresses. */
static long route_dump(void) {
	int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (s < 0) return -1;
	struct { struct nlmsghdr h; struct rtgenmsg g; } req = {
		.h = {.nlmsg_len = sizeof req, .nlmsg_type = RTM_GETLINK, .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1},
		.g = {.rtgen_family = AF_UNSPEC},
	};
	if (send(s, &req, sizeof req, 0) < 0) return -1;
	char buf[8192];
	long n = recv(s, buf, sizeof buf, 0);
	if (n < (long)sizeof(struct nlmsghdr)) return -1;
	struct nlmsghdr *h = (struct nlmsghdr *)buf;
	if (h->nlmsg_type != RTM_NEWLINK) { errno = EBADMSG; return -1; }
	return 0;
}

static long i386_getpid(void) {
	long ret;
	/* int 0x80 with eax=20 (getpid in the i386 table) */
	__asm__ volatile("int $0x80" : "=a"(ret) : "a"(20) : "memory");
	if (ret < 0 && ret > -4096) {
		errno = -ret;
		return -1;
	}
	return ret;
}

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: probe NAME [ARG]\n");
		return 2;
	}
	const char *p = argv[1];
	const char *arg = argc > 2 ? argv[2] : "";
	errno = 0;
	if (!strcmp(p, "unshare-user")) return report(p, unshare(CLONE_NEWUSER));
	if (!strcmp(p, "unshare-ns")) return report(p, unshare(CLONE_NEWNS));
	if (!strcmp(p, "unshare-net")) return report(p, unshare(CLONE_NEWNET));
	if (!strcmp(p, "clone-newuser")) {
		long rc = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
		if (rc == 0) _exit(0);
		if (rc > 0) waitpid(rc, 0, 0);
		return report(p, rc);
	}
	if (!strcmp(p, "clone-newpid")) {
		long rc = syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, 0, 0, 0);
		if (rc == 0) _exit(0);
		if (rc > 0) waitpid(rc, 0, 0);
		return report(p, rc);
	}
	if (!strcmp(p, "clone3")) {
		long rc = syscall(435 /* clone3 */, 0, 0);
		if (rc < 0 && errno == ENOSYS) { printf("blocked:clone3:ENOSYS\n"); return 0; }
		if (rc < 0) { printf("clone3-unexpected-errno:%d\n", errno); return 0; }
		return report(p, rc);
	}
	if (!strcmp(p, "fork")) { /* plain fork must still work */
		pid_t c = fork();
		if (c == 0) _exit(7);
		int st = 0;
		waitpid(c, &st, 0);
		printf("fork-ok:%d\n", WEXITSTATUS(st));
		return 0;
	}
	if (!strcmp(p, "mount")) return report(p, mount("tmpfs", "/tmp", "tmpfs", 0, ""));
	if (!strcmp(p, "umount")) return report(p, umount2("/proc", MNT_DETACH));
	if (!strcmp(p, "pivot_root")) return report(p, syscall(SYS_pivot_root, "/tmp", "/tmp"));
	if (!strcmp(p, "open_tree")) return report(p, syscall(428, AT_FDCWD, "/usr", 1 /* OPEN_TREE_CLONE */));
	if (!strcmp(p, "move_mount")) return report(p, syscall(429, -1, "", AT_FDCWD, "/tmp", 0));
	if (!strcmp(p, "fsopen")) return report(p, syscall(430, "tmpfs", 0));
	if (!strcmp(p, "setns")) {
		int fd = open("/proc/self/ns/net", O_RDONLY);
		return report(p, syscall(SYS_setns, fd, 0));
	}
	if (!strcmp(p, "ptrace")) return report(p, ptrace(PTRACE_TRACEME, 0, 0, 0));
	if (!strcmp(p, "process_vm_readv")) {
		char buf[8], src[8] = "x";
		struct iovec l = {buf, 8}, r = {src, 8};
		return report(p, process_vm_readv(getpid(), &l, 1, &r, 1, 0));
	}
	if (!strcmp(p, "bpf")) {
		union bpf_attr a;
		memset(&a, 0, sizeof a);
		a.map_type = BPF_MAP_TYPE_ARRAY; a.key_size = 4; a.value_size = 4; a.max_entries = 1;
		return report(p, syscall(SYS_bpf, BPF_MAP_CREATE, &a, sizeof a));
	}
	if (!strcmp(p, "keyctl")) return report(p, syscall(SYS_keyctl, 1 /* JOIN_SESSION_KEYRING */, 0));
	if (!strcmp(p, "add_key")) return report(p, syscall(SYS_add_key, "user", "k", "v", 1, -3));
	if (!strcmp(p, "request_key")) return report(p, syscall(SYS_request_key, "user", "k", 0, 0));
	if (!strcmp(p, "perf_event_open")) {
		struct perf_event_attr a;
		memset(&a, 0, sizeof a);
		a.type = PERF_TYPE_SOFTWARE; a.size = sizeof a; a.config = PERF_COUNT_SW_CPU_CLOCK;
		return report(p, syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
	}
	if (!strcmp(p, "io_uring_setup")) {
		char params[120];
		memset(params, 0, sizeof params);
		return report(p, syscall(425, 8, params));
	}
	if (!strcmp(p, "open_by_handle_at")) {
		char h[128];
		memset(h, 0, sizeof h);
		*(unsigned *)h = 8;
		return report(p, syscall(SYS_open_by_handle_at, AT_FDCWD, h, O_RDONLY));
	}
	if (!strcmp(p, "userfaultfd")) return report(p, syscall(SYS_userfaultfd, 0));
	if (!strcmp(p, "kexec_load")) return report(p, syscall(SYS_kexec_load, 0, 0, 0, 0));
	if (!strcmp(p, "init_module")) return report(p, syscall(SYS_init_module, "", 0, ""));
	if (!strcmp(p, "reboot")) return report(p, syscall(SYS_reboot, 0xfee1dead, 672274793, 0 /* CAD_OFF */, 0));
	if (!strcmp(p, "chroot")) return report(p, chroot("/tmp"));
	if (!strcmp(p, "setuid0")) return report(p, setuid(0));
	if (!strcmp(p, "tiocsti")) {
		char c = 'x';
		long rc = ioctl(0, TIOCSTI, &c);
		if (rc < 0 && errno != EACCES) { printf("tiocsti-not-seccomp:%d\n", errno); return 0; }
		return report(p, rc);
	}
	if (!strcmp(p, "tiocsti-highbits")) {
		char c = 'x';
		long rc = syscall(SYS_ioctl, 0, (unsigned long)TIOCSTI | (1UL << 32), &c);
		if (rc < 0 && errno != EACCES) { printf("tiocsti-not-seccomp:%d\n", errno); return 0; }
		return report(p, rc);
	}
	if (!strcmp(p, "tioclinux")) {
		char c = 0;
		long rc = ioctl(0, TIOCLINUX, &c);
		if (rc < 0 && errno != EACCES) { printf("tioclinux-not-seccomp:%d\n", errno); return 0; }
		return report(p, rc);
	}
	if (!strcmp(p, "x32")) {
		long rc = syscall(0x40000000 | 39 /* getpid, x32 */);
		return report(p, rc);
	}
	if (!strcmp(p, "i386")) {
		printf("trying i386\n");
		fflush(stdout);
		return report(p, i386_getpid());
	}
	if (!strcmp(p, "connect-unix")) { /* arg: a unix socket path a host process may serve */
		struct sockaddr_un a;
		memset(&a, 0, sizeof a);
		a.sun_family = AF_UNIX;
		strncpy(a.sun_path, arg, sizeof a.sun_path - 1);
		int s = socket(AF_UNIX, SOCK_STREAM, 0);
		if (s < 0) return report(p, s);
		return report(p, connect(s, (struct sockaddr *)&a, sizeof a));
	}
	if (!strcmp(p, "write-fifo")) { /* arg: a FIFO a host process reads */
		int fd = open(arg, O_WRONLY | O_NONBLOCK);
		if (fd < 0) return report(p, fd);
		return report(p, write(fd, "ESCAPED-FIFO\n", 13));
	}
	if (!strcmp(p, "connect")) { /* arg: port on 127.0.0.1 */
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (s < 0) return report(p, s);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(arg))};
		inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
		return report(p, connect(s, (struct sockaddr *)&a, sizeof a));
	}
	/* Socket families: only AF_UNIX, AF_INET, AF_INET6 and NETLINK_ROUTE open. */
	int sv[2];
	if (!strcmp(p, "vsock")) return report(p, socket(AF_VSOCK, SOCK_STREAM, 0)); /* not namespaced: reaches the host */
	if (!strcmp(p, "packet")) return report(p, socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL)));
	if (!strcmp(p, "inet-packet")) /* the kernel turns (AF_INET, SOCK_PACKET) into AF_PACKET */
		return report(p, socket(AF_INET, SOCK_PACKET, htons(ETH_P_ALL)));
	if (!strcmp(p, "alg")) return report(p, socket(AF_ALG, SOCK_SEQPACKET, 0));
	if (!strcmp(p, "uevent")) /* receives the host's uevents */
		return report(p, socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT));
	if (!strcmp(p, "bluetooth")) return report(p, socket(AF_BLUETOOTH, SOCK_SEQPACKET, 0));
	/* The kernel reads the domain and protocol as int; seccomp sees all 64 bits. */
	if (!strcmp(p, "vsock-highbits")) return report(p, syscall(SYS_socket, (1UL << 32) | AF_VSOCK, SOCK_STREAM, 0));
	if (!strcmp(p, "unix-highbits")) return report(p, syscall(SYS_socket, (1UL << 32) | AF_UNIX, SOCK_STREAM, 0));
	if (!strcmp(p, "uevent-highbits"))
		return report(p, syscall(SYS_socket, AF_NETLINK, SOCK_DGRAM, (1UL << 32) | NETLINK_KOBJECT_UEVENT));
	if (!strcmp(p, "route-highbits"))
		return report(p, syscall(SYS_socket, AF_NETLINK, SOCK_RAW, (1UL << 32) | NETLINK_ROUTE));
	if (!strcmp(p, "socketpair-vsock")) return report(p, socketpair(AF_VSOCK, SOCK_STREAM, 0, sv));
	if (!strcmp(p, "socketpair-packet")) return report(p, socketpair(AF_PACKET, SOCK_RAW, 0, sv));
	if (!strcmp(p, "socketpair-highbits"))
		return report(p, syscall(SYS_socketpair, (1UL << 32) | AF_UNIX, SOCK_STREAM, 0, sv));
	const int fl = SOCK_CLOEXEC | SOCK_NONBLOCK;
	if (!strcmp(p, "unix")) return ok(p, socket(AF_UNIX, SOCK_STREAM, 0));
	if (!strcmp(p, "unix-flags")) return ok(p, socket(AF_UNIX, SOCK_DGRAM | fl, 0));
	if (!strcmp(p, "socketpair-unix")) return ok(p, socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	if (!strcmp(p, "socketpair-unix-flags")) return ok(p, socketpair(AF_UNIX, SOCK_SEQPACKET | fl, 0, sv));
	if (!strcmp(p, "inet")) return ok(p, socket(AF_INET, SOCK_STREAM, 0));
	if (!strcmp(p, "inet-flags")) return ok(p, socket(AF_INET, SOCK_DGRAM | fl, IPPROTO_UDP));
	if (!strcmp(p, "inet6")) return ok(p, socket(AF_INET6, SOCK_STREAM, 0));
	if (!strcmp(p, "inet6-flags")) return ok(p, socket(AF_INET6, SOCK_STREAM | fl, IPPROTO_TCP));
	if (!strcmp(p, "route")) return ok(p, socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE));
	if (!strcmp(p, "route-flags")) return ok(p, socket(AF_NETLINK, SOCK_DGRAM | fl, NETLINK_ROUTE));
	if (!strcmp(p, "route-dump")) return ok(p, route_dump());
	if (!strcmp(p, "sweep")) return sweep(arg);
	if (!strcmp(p, "read")) { /* arg: a host path that must not be visible */
		int fd = open(arg, O_RDONLY);
		if (fd < 0) return report(p, fd);
		char buf[256];
		long n = read(fd, buf, sizeof buf - 1);
		if (n > 0) { buf[n] = 0; printf("CONTENT:%s\n", buf); return report(p, n); }
		if (n == 0) errno = ENODATA; /* a masked file reads empty: not an escape */
		return report(p, -1);
	}
	if (!strcmp(p, "write")) { /* arg: a path to create */
		return report(p, open(arg, O_WRONLY | O_CREAT | O_TRUNC, 0644));
	}
	if (!strcmp(p, "fds")) {
		DIR *d = opendir("/proc/self/fd");
		int self = dirfd(d);
		struct dirent *e;
		printf("FDS:");
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.' || atoi(e->d_name) == self) continue;
			printf("%s,", e->d_name);
		}
		printf("\n");
		return 0;
	}
	if (!strcmp(p, "env")) {
		for (char **e = environ; *e; e++) printf("ENV:%s\n", *e);
		return 0;
	}
	if (!strcmp(p, "status")) {
		FILE *f = fopen("/proc/self/status", "r");
		char line[256];
		while (fgets(line, sizeof line, f))
			if (!strncmp(line, "Cap", 3) || !strncmp(line, "NoNewPrivs", 10) || !strncmp(line, "Seccomp:", 8) || !strncmp(line, "Uid", 3) || !strncmp(line, "Gid", 3))
				printf("%s", line);
		return 0;
	}
	if (!strcmp(p, "balloon")) { /* touch arg MiB */
		long mb = atol(arg);
		for (long i = 0; i < mb; i++) {
			char *b = malloc(1 << 20);
			if (!b) { printf("malloc-failed\n"); return 1; }
			memset(b, 1, 1 << 20);
		}
		printf("balloon-done\n");
		return 0;
	}
	fprintf(stderr, "unknown probe %s\n", p);
	return 2;
}
