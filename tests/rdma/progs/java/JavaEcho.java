// A plain java.net echo server and client, as every JVM program talks: the
// JVM opens IPv6 sockets and reaches IPv4 peers through v4-mapped addresses
// (issue 21: such programs never reached RDMA). Used by
// tests/rdma/cases/java.sh.
//   java JavaEcho server PORT
//   java JavaEcho client HOST PORT BYTES RELEASE_FILE
// The client echoes BYTES of random data in 4 KiB round trips, compares
// SHA-256 of what it sent and got back, prints PASS or FAIL, then keeps the
// connection busy with 1-byte round trips until RELEASE_FILE exists.
import java.io.DataInputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.util.Arrays;
import java.util.Random;

public class JavaEcho {
    public static void main(String[] args) throws Exception {
        if (args[0].equals("server"))
            server(Integer.parseInt(args[1]));
        else
            System.exit(client(args[1], Integer.parseInt(args[2]), Long.parseLong(args[3]), args[4]));
    }

    static void server(int port) throws Exception {
        try (ServerSocket listener = new ServerSocket(port)) {
            for (;;) {
                Socket s = listener.accept();
                Thread t = new Thread(() -> echo(s));
                t.setDaemon(true);
                t.start();
            }
        }
    }

    static void echo(Socket s) {
        byte[] buf = new byte[65536];
        try (s; InputStream in = s.getInputStream(); OutputStream out = s.getOutputStream()) {
            int n;
            while ((n = in.read(buf)) > 0)
                out.write(buf, 0, n);
        } catch (Exception e) {
            System.err.println("server: " + e);
        }
    }

    static int client(String host, int port, long total, String release) throws Exception {
        MessageDigest sent = MessageDigest.getInstance("SHA-256");
        MessageDigest got = MessageDigest.getInstance("SHA-256");
        Random random = new Random();
        byte[] chunk = new byte[4096], back = new byte[4096];
        try (Socket s = new Socket(host, port)) {
            System.out.println("connected from " + s.getLocalAddress() + " to " + s.getInetAddress());
            DataInputStream in = new DataInputStream(s.getInputStream());
            OutputStream out = s.getOutputStream();
            for (long n = 0; n < total; n += chunk.length) {
                random.nextBytes(chunk);
                sent.update(chunk);
                out.write(chunk);
                in.readFully(back);
                got.update(back);
            }
            boolean same = Arrays.equals(sent.digest(), got.digest());
            System.out.println("echoed " + total + " bytes, " + (same ? "same" : "DIFFERENT"));
            System.out.println(same ? "PASS" : "FAIL");
            System.out.flush();
            // Busy until the shell has looked at `vsocket stat`.
            while (same && !Files.exists(Paths.get(release))) {
                out.write('x');
                same = in.read() == 'x';
                Thread.sleep(50);
            }
            return same ? 0 : 1;
        }
    }
}
