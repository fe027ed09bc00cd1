package kgqr.opensearch;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.Supplier;

import org.opensearch.action.ActionRequest;
import org.opensearch.action.admin.indices.create.CreateIndexRequest;
import org.opensearch.action.admin.indices.mapping.put.PutMappingRequest;
import org.opensearch.action.admin.indices.template.put.PutComponentTemplateAction;
import org.opensearch.action.admin.indices.template.put.PutComposableIndexTemplateAction;
import org.opensearch.action.admin.indices.template.put.PutIndexTemplateRequest;
import org.opensearch.action.support.ActionFilter;
import org.opensearch.action.support.ActionFilterChain;
import org.opensearch.client.Client;
import org.opensearch.cluster.metadata.IndexMetadata;
import org.opensearch.cluster.metadata.IndexNameExpressionResolver;
import org.opensearch.cluster.metadata.Metadata;
import org.opensearch.cluster.metadata.Template;
import org.opensearch.cluster.service.ClusterService;
import org.opensearch.common.regex.Regex;
import org.opensearch.common.settings.Setting;
import org.opensearch.common.settings.Settings;
import org.opensearch.common.xcontent.XContentHelper;
import org.opensearch.common.xcontent.json.JsonXContent;
import org.opensearch.core.index.Index;
import org.opensearch.core.action.ActionListener;
import org.opensearch.core.action.ActionResponse;
import org.opensearch.core.common.io.stream.NamedWriteableRegistry;
import org.opensearch.core.xcontent.NamedXContentRegistry;
import org.opensearch.env.Environment;
import org.opensearch.env.NodeEnvironment;
import org.opensearch.index.IndexModule;
import org.opensearch.index.shard.IndexEventListener;
import org.opensearch.index.shard.IndexShard;
import org.opensearch.plugins.ActionPlugin;
import org.opensearch.plugins.Plugin;
import org.opensearch.repositories.RepositoriesService;
import org.opensearch.script.ScriptService;
import org.opensearch.tasks.Task;
import org.opensearch.threadpool.ThreadPool;
import org.opensearch.watcher.ResourceWatcherService;

/**
 * Refuses, with a 400, any mapping that would make this node build a native k-NN index.
 *
 * <p>The k-NN plugin on Maven Central carries no native libraries. A knn_vector field on the
 * faiss or nmslib engine (what LlamaIndex, Haystack and LangChain map by default, and what a
 * field without an engine gets on 2.19 when index.knn is on) loads them on the first refresh;
 * the UnsatisfiedLinkError is fatal, and the node dies again on every restart while it
 * recovers that index. Checked here, before the mapping exists: index creation, mapping
 * updates, and all three kinds of template (whose mappings indices created later inherit);
 * and again when a shard is created, for indices older than the guard.
 */
public class KgqrEngineGuard extends Plugin implements ActionPlugin {
    static final String RUNNABLE_ENGINE = "lucene";
    /** Off only in kgqr's test that a node dying on such an index is diagnosed and repaired. */
    static final Setting<Boolean> ENABLED = Setting.boolSetting(
        "kgqr.engine_guard.enabled", true, Setting.Property.NodeScope);

    private volatile ClusterService clusterService;
    private volatile boolean enabled = true;

    @Override
    public List<Setting<?>> getSettings() {
        return List.of(ENABLED);
    }

    @Override
    public Collection<Object> createComponents(Client client, ClusterService clusterService,
            ThreadPool threadPool, ResourceWatcherService watcher, ScriptService scripts,
            NamedXContentRegistry xContentRegistry, Environment environment,
            NodeEnvironment nodeEnvironment, NamedWriteableRegistry writeables,
            IndexNameExpressionResolver resolver, Supplier<RepositoriesService> repositories) {
        this.clusterService = clusterService;
        this.enabled = ENABLED.get(environment.settings());
        return List.of();
    }

    @Override
    public List<ActionFilter> getActionFilters() {
        return List.of(new MappingFilter());
    }

    /**
     * The same check for an index made before the guard existed: its shard fails to open
     * (the index goes red and the node stays up) instead of the node dying while recovering
     * it. A closed index opens no engine, so it is let through: closing is the way out.
     */
    @Override
    public void onIndexModule(IndexModule module) {
        module.addIndexEventListener(new IndexEventListener() {
            @Override
            public void afterIndexShardCreated(IndexShard shard) {
                IndexMetadata metadata = shard.indexSettings().getIndexMetadata();
                if (!enabled || metadata.getState() == IndexMetadata.State.CLOSE
                        || shard.mapperService().documentMapper() == null) {
                    return;
                }
                String refusal = check(
                    shard.mapperService().documentMapper().mappingSource().string(),
                    knnEnabled(metadata.getSettings()));
                if (refusal != null) {
                    throw new IllegalStateException("index [" + metadata.getIndex().getName()
                        + "] cannot be opened: " + refusal + " Or close the index.");
                }
            }
        });
    }

    private final class MappingFilter implements ActionFilter {
        @Override
        public int order() {
            return Integer.MIN_VALUE; // before the engine's own handling
        }

        @Override
        public <Request extends ActionRequest, Response extends ActionResponse> void apply(
                Task task, String action, Request request, ActionListener<Response> listener,
                ActionFilterChain<Request, Response> chain) {
            String refusal;
            try {
                refusal = enabled ? refusal(request) : null;
            } catch (RuntimeException malformed) {
                refusal = null; // the engine reports malformed mappings itself
            }
            if (refusal != null) {
                listener.onFailure(new IllegalArgumentException(refusal));
                return;
            }
            chain.proceed(task, action, request, listener);
        }
    }

    private String refusal(ActionRequest request) {
        if (request instanceof CreateIndexRequest create) {
            return check(create.mappings(), knnEnabled(create.settings()));
        }
        if (request instanceof PutMappingRequest put) {
            return check(put.source(), anyKnnIndex(put.indices(), put.getConcreteIndex()));
        }
        if (request instanceof PutIndexTemplateRequest legacy) {
            return check(legacy.mappings(), true);
        }
        if (request instanceof PutComposableIndexTemplateAction.Request composable) {
            return composable.indexTemplate() == null
                ? null : checkTemplate(composable.indexTemplate().template());
        }
        if (request instanceof PutComponentTemplateAction.Request component) {
            return component.componentTemplate() == null
                ? null : checkTemplate(component.componentTemplate().template());
        }
        return null;
    }

    /** Templates are checked as if index.knn were on: the setting may come from another one. */
    private static String checkTemplate(Template template) {
        if (template == null || template.mappings() == null) {
            return null;
        }
        return check(template.mappings().string(), true);
    }

    private static boolean knnEnabled(Settings settings) {
        return settings != null
            && (settings.getAsBoolean("index.knn", false) || settings.getAsBoolean("knn", false));
    }

    /**
     * Whether a mapping update may reach a k-NN index. Each name is judged on its own: one
     * list naming a plain index and an alias of a k-NN one was judged by the plain index
     * alone, and the alias's index took a field on the default (native) engine. A name
     * that matches no index nor alias (a data stream, date math, an unknown name) is
     * judged as a k-NN index; an update the engine makes itself (dynamic mapping) names
     * its concrete index, judged by its own setting.
     */
    private boolean anyKnnIndex(String[] patterns, Index concrete) {
        ClusterService cluster = clusterService;
        if (cluster == null) {
            return true;
        }
        Metadata metadata = cluster.state().metadata();
        if (concrete != null) {
            IndexMetadata index = metadata.index(concrete);
            return index == null || knnEnabled(index.getSettings());
        }
        if (patterns == null || patterns.length == 0) {
            return true;
        }
        for (String pattern : patterns) {
            boolean matched = false;
            for (IndexMetadata index : metadata) {
                if (named(pattern, index)) {
                    matched = true;
                    if (knnEnabled(index.getSettings())) {
                        return true;
                    }
                }
            }
            if (!matched) {
                return true;
            }
        }
        return false;
    }

    /** Whether `pattern` names `index`, by its name or one of its aliases. */
    private static boolean named(String pattern, IndexMetadata index) {
        if (pattern.equals("_all") || Regex.simpleMatch(pattern, index.getIndex().getName())) {
            return true;
        }
        for (String alias : index.getAliases().keySet()) {
            if (Regex.simpleMatch(pattern, alias)) {
                return true;
            }
        }
        return false;
    }

    static String check(String mappingJson, boolean knnEnabled) {
        if (mappingJson == null || mappingJson.isBlank()) {
            return null;
        }
        Map<String, Object> mapping = XContentHelper.convertToMap(
            JsonXContent.jsonXContent, mappingJson, false);
        List<String> problems = new ArrayList<>();
        walk(mapping, "", knnEnabled, problems);
        if (problems.isEmpty()) {
            return null;
        }
        return "this OpenSearch node has no native k-NN libraries, so it can run knn_vector "
            + "fields only on the lucene engine: " + String.join("; ", problems)
            + ". Set \"method\": {\"name\": \"hnsw\", \"engine\": \"lucene\"} on the field "
            + "(your client's vector store usually takes an engine option).";
    }

    private static void walk(Object node, String path, boolean knnEnabled, List<String> out) {
        if (node instanceof Map<?, ?> map) {
            if ("knn_vector".equals(map.get("type"))) {
                String problem = fieldProblem(map, knnEnabled);
                if (problem != null) {
                    out.add("field [" + (path.isEmpty() ? "?" : path) + "] " + problem);
                }
            }
            for (Map.Entry<?, ?> entry : map.entrySet()) {
                String key = String.valueOf(entry.getKey());
                boolean structural = key.equals("properties") || key.equals("mapping")
                    || key.equals("fields") || key.equals("dynamic_templates");
                String next = structural ? path : (path.isEmpty() ? key : path + "." + key);
                walk(entry.getValue(), next, knnEnabled, out);
            }
        } else if (node instanceof List<?> list) {
            for (Object item : list) {
                walk(item, path, knnEnabled, out);
            }
        }
    }

    private static String fieldProblem(Map<?, ?> field, boolean knnEnabled) {
        Object method = field.get("method");
        Object engine = method instanceof Map<?, ?> m ? m.get("engine") : null;
        if (engine != null) {
            String name = String.valueOf(engine).toLowerCase(Locale.ROOT);
            return name.equals(RUNNABLE_ENGINE) ? null : "names engine [" + engine + "]";
        }
        if (field.containsKey("model_id")) {
            return "uses a trained model, which needs the faiss engine";
        }
        if (knnEnabled) {
            return "names no engine, and the default on this version is faiss";
        }
        return null;
    }
}
