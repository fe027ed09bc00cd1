import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;

import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.dbms.api.DatabaseManagementServiceBuilder;
import org.neo4j.internal.kernel.api.exceptions.ProcedureException;
import org.neo4j.io.ByteUnit;
import org.neo4j.kernel.api.procedure.GlobalProcedures;
import org.neo4j.kernel.internal.GraphDatabaseAPI;

/**
 * Runs an embedded Neo4j with its Bolt server, for machines that have no Docker engine.
 *
 * The Neo4j server distribution is not on Maven Central, but the kernel and the Bolt
 * connector are; this launcher is the smallest program that turns them into a server
 * that the official drivers can reach, with kgqr's procedures ({@code KgqrRelationMerge})
 * registered. Arguments: home dir, bolt host, bolt port, page cache size in MiB.
 */
public final class KgqrNeo4jLauncher {
    public static void main(String[] args) throws InterruptedException, ProcedureException {
        if (args.length != 4) {
            System.err.println("usage: KgqrNeo4jLauncher HOME_DIR HOST PORT PAGECACHE_MB");
            System.exit(2);
        }
        Path home = Path.of(args[0]);
        String host = args[1];
        int port = Integer.parseInt(args[2]);
        long pageCacheMb = Long.parseLong(args[3]);

        DatabaseManagementService service = new DatabaseManagementServiceBuilder(home)
                .setConfig(BoltConnector.enabled, true)
                .setConfig(BoltConnector.listen_address, new SocketAddress(host, port))
                .setConfig(GraphDatabaseSettings.pagecache_memory, ByteUnit.mebiBytes(pageCacheMb))
                .setConfig(GraphDatabaseSettings.keep_logical_logs, "1 files")
                // Keep-alive NOOPs only while streaming results. With ALL, the server hints
                // a receive timeout to drivers, and the Python async driver then wraps every
                // socket read in asyncio.wait_for: ~0.15 ms per record returned.
                .setConfig(BoltConnector.connection_keep_alive_type,
                        BoltConnector.KeepAliveRequestType.STREAMING)
                .build();
        ((GraphDatabaseAPI) service.database(GraphDatabaseSettings.DEFAULT_DATABASE_NAME))
                .getDependencyResolver()
                .resolveDependency(GlobalProcedures.class)
                .registerProcedure(KgqrRelationMerge.class);

        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            service.shutdown();
            stopped.countDown();
        }, "kgqr-neo4j-shutdown"));
        System.out.println("kgqr-neo4j ready bolt://" + host + ":" + port);
        System.out.flush();
        stopped.await();
    }
}
