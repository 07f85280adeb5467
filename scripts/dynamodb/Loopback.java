// Loopback runs AWS's DynamoDB Local listening on 127.0.0.1 only. DynamoDB Local has no
// bind-address option: its command line takes a port and listens on every interface. This
// launcher builds the server from the same command line (-inMemory, -port, ...), sets the host
// of its Jetty connector to 127.0.0.1 before starting it, and runs it. Java's single-file source
// launcher runs it (java -cp "DynamoDBLocal.jar:DynamoDBLocal_lib/*" Loopback.java ARGS), so no
// build step and nothing compiled is kept.

import com.amazonaws.services.dynamodbv2.local.main.ServerRunner;
import com.amazonaws.services.dynamodbv2.local.server.DynamoDBProxyServer;
import java.lang.reflect.Field;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

public class Loopback {
  public static void main(String[] args) throws Exception {
    DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
    Field field = DynamoDBProxyServer.class.getDeclaredField("server");
    field.setAccessible(true);
    Server jetty = (Server) field.get(proxy);
    int bound = 0;
    for (Connector c : jetty.getConnectors()) {
      if (c instanceof ServerConnector) {
        ((ServerConnector) c).setHost("127.0.0.1");
        bound++;
      }
    }
    if (bound == 0) {
      throw new IllegalStateException("DynamoDB Local has no connector to bind to 127.0.0.1");
    }
    proxy.start();
    proxy.join();
  }
}
