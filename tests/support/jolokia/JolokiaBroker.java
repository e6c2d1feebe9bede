// A real JVM for the jolokia inspector's test: Debian's ActiveMQ 5 broker (embedded, in memory)
// and Debian's Jolokia 1.7 core serving its MBeans and java.lang's over HTTP, in one process.
//
//   java -cp <jars> JolokiaBroker.java HTTP_PORT QUEUE MESSAGES USER PASSWORD
//
// Puts MESSAGES messages on QUEUE, prints "READY <port>" and serves until killed, to requests
// with HTTP basic authentication as USER (Artemis's Jolokia asks for it: 401 without). Jolokia's own
// request handler does the protocol work (the same class its JVM agent and servlet use); this
// file only hands it HTTP requests, through the JDK's built-in HTTP server.
import com.sun.net.httpserver.BasicAuthenticator;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import javax.jms.Connection;
import javax.jms.MessageProducer;
import javax.jms.Session;
import org.apache.activemq.ActiveMQConnectionFactory;
import org.apache.activemq.broker.BrokerService;
import org.jolokia.backend.BackendManager;
import org.jolokia.config.ConfigKey;
import org.jolokia.config.Configuration;
import org.jolokia.http.HttpRequestHandler;
import org.jolokia.util.LogHandler;
import org.json.simple.JSONAware;

public class JolokiaBroker {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        String queue = args[1];
        int messages = Integer.parseInt(args[2]);
        String user = args[3];
        String password = args[4];

        BrokerService broker = new BrokerService();
        broker.setBrokerName("maestro-test");
        broker.setPersistent(false);
        broker.setUseJmx(true);
        broker.getManagementContext().setCreateConnector(false);
        broker.start();
        broker.waitUntilStarted();

        Connection connection = new ActiveMQConnectionFactory("vm://maestro-test?create=false").createConnection();
        connection.start();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = session.createProducer(session.createQueue(queue));
        for (int i = 0; i < messages; i++) {
            producer.send(session.createTextMessage("message " + i));
        }
        // A consumer on the queue, so that its consumer count is 1; it takes nothing (no listener, no receive).
        session.createConsumer(session.createQueue(queue + ".consumed"));

        Configuration config = new Configuration(ConfigKey.AGENT_ID, "maestro-test");
        LogHandler log = new LogHandler.StdoutLogHandler(false);
        HttpRequestHandler jolokia = new HttpRequestHandler(config, new BackendManager(config, log), log);
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 0);
        server.createContext("/jolokia", exchange -> serve(jolokia, exchange))
                .setAuthenticator(new BasicAuthenticator("jolokia") {
                    @Override
                    public boolean checkCredentials(String who, String secret) {
                        return user.equals(who) && password.equals(secret);
                    }
                });
        server.start();
        System.out.println("READY " + server.getAddress().getPort());
        System.out.flush();
        Thread.currentThread().join();
    }

    private static void serve(HttpRequestHandler jolokia, HttpExchange exchange) {
        try {
            URI uri = exchange.getRequestURI();
            String path = uri.getPath().substring("/jolokia".length());
            Map<String, String[]> params = new HashMap<>();
            if (uri.getQuery() != null) {
                for (String pair : uri.getQuery().split("&")) {
                    String[] kv = pair.split("=", 2);
                    params.put(kv[0], new String[] {kv.length > 1 ? kv[1] : ""});
                }
            }
            JSONAware answer;
            try {
                answer = "POST".equals(exchange.getRequestMethod())
                        ? jolokia.handlePostRequest(uri.toString(), exchange.getRequestBody(), "utf-8", params)
                        : jolokia.handleGetRequest(uri.toString(), path, params);
            } catch (Throwable error) {
                answer = jolokia.handleThrowable(error);
            }
            byte[] body = answer.toJSONString().getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().set("Content-Type", "application/json");
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        } catch (Exception error) {
            error.printStackTrace();
        } finally {
            exchange.close();
        }
    }
}
